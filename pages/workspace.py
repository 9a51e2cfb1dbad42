"""Workspace page: open the demo or a folder, review its problems, or build one from uploads."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st
from streamlit.runtime.uploaded_file_manager import UploadedFile

from pages._common import PAGES, WS_KEY, app_root, default_workspace, guarded
from sde_core.errors import SDEError
from sde_core.inputs.data import DATASET_KINDS
from sde_core.inputs.models import ARCHITECTURES, load_checkpoint, save_checkpoint
from sde_core.pipeline.workspace import (
    ROLES,
    WORKSPACE_FILE,
    ModelEntry,
    Problem,
    Workspace,
    load_workspace,
    relative_to_workspace,
    validate_workspace,
    write_workspace,
)
from sde_core.viz.ui_support import (
    CHECKPOINT_SUFFIXES,
    INDEX_SUFFIXES,
    MAX_UPLOAD_MB,
    allowed_roots,
    check_upload,
    guess_role,
    problems_by_field,
    resolve_in_roots,
    safe_name,
)

AUTO_ARCH = "(read from the file)"


def show_problems(problems: list[Problem]) -> None:
    """One inline message per field: an error if any of its problems is one, else a warning."""
    for field, found in problems_by_field(problems).items():
        text = f"**{field}** — " + " · ".join(p.message for p in found)
        (st.error if any(p.severity == "error" for p in found) else st.warning)(text)


def show_current(path: str) -> None:
    """Summary of the open workspace with its validation problems."""
    try:
        ws = load_workspace(path, validate=False)
    except SDEError as exc:
        st.error(f"Cannot read the workspace {path}: {exc}")
        return
    st.subheader(f"Open: {ws.name or ws.root.name}")
    st.caption(f"{ws.root} · {ws.description}" if ws.description else str(ws.root))
    left, right = st.columns([2, 3])
    with left:
        st.markdown("**Dataset**")
        st.json(ws.dataset, expanded=False)
        st.markdown(f"**Forget set:** `{ws.forget_indices}`")
        defaults = ", ".join(f"{k} = {v}" for k, v in vars(ws.defaults).items())
        st.markdown(f"**Defaults:** {defaults}")
    with right:
        st.markdown(f"**Models** ({len(ws.models)})")
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "name": m.name,
                        "role": m.role,
                        "method": m.method,
                        "arch": m.arch,
                        "checkpoint": m.checkpoint,
                        "checkpoints during training": len(m.checkpoints),
                    }
                    for m in ws.models
                ]
            ),
            hide_index=True,
        )
    problems = validate_workspace(ws)
    show_problems(problems)
    if not any(p.severity == "error" for p in problems):
        st.success(f"The workspace is valid: {len(ws.models)} models.")
        st.page_link(PAGES["explore"], label="Explore a model", icon=":material/query_stats:")


def open_section() -> None:
    """Buttons for the bundled demos and a folder field checked against the allowed roots."""
    demos = [
        app_root() / "assets" / name
        for name in ("demo", "demo-mnist1d")
        if (app_root() / "assets" / name / WORKSPACE_FILE).is_file()
    ]
    cols = st.columns(max(1, len(demos)))
    for col, folder in zip(cols, demos, strict=False):
        if col.button(f"Open the bundled {folder.name}", key=f"open_{folder.name}"):
            st.session_state[WS_KEY] = str(folder)
            st.rerun()
    folder = st.text_input(
        "Workspace folder",
        key="open_path",
        placeholder=default_workspace(),
        help="A folder holding workspace.toml, inside the allowed folders.",
    )
    if st.button("Open folder", key="open_folder"):
        with guarded("Cannot open this folder"):
            path = resolve_in_roots(folder, allowed_roots(), what="workspace folder")
            load_workspace(path, validate=False)
            st.session_state[WS_KEY] = str(path)
            st.rerun()


def _save_checkpoint_upload(
    upload: UploadedFile, index: int, models_dir: Path, trusted: bool
) -> tuple[ModelEntry | None, list[Problem]]:
    """Write one uploaded checkpoint, load it safely and describe it as a model entry."""
    field = f"checkpoint {upload.name}"
    name = st.session_state.get(f"b_model_name_{index}", "").strip()
    arch_choice = st.session_state.get(f"b_model_arch_{index}", AUTO_ARCH)
    target: Path | None = None
    try:
        target = models_dir / check_upload(upload.name, upload.size, CHECKPOINT_SUFFIXES)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(upload.getvalue())
        arch = None if arch_choice == AUTO_ARCH else arch_choice
        model = load_checkpoint(target, arch=arch, trusted=trusted)
        arch = arch or getattr(model, "sde_arch", None)
        if arch is None:
            return None, [Problem(field, "the architecture is unknown: choose it in the list")]
        kwargs = dict(getattr(model, "sde_arch_kwargs", {}))
        if trusted and target.suffix != ".safetensors":
            safe = target.with_suffix(".safetensors")
            save_checkpoint(model, safe, arch, arch_kwargs=kwargs)
            target.unlink()
            target = safe
    except SDEError as exc:
        if target is not None:
            target.unlink(missing_ok=True)
        return None, [Problem(field, str(exc))]
    entry = ModelEntry(
        name=name or target.stem,
        role=st.session_state.get(f"b_model_role_{index}", "unlearned"),
        arch=arch,
        arch_kwargs=kwargs,
        checkpoint=f"models/{target.name}",
        method=st.session_state.get(f"b_model_method_{index}", "").strip(),
    )
    return entry, []


def build_workspace(uploads: list[UploadedFile], forget: UploadedFile | None) -> None:
    """Validate every field, write the uploads and ``workspace.toml``, and open it."""
    roots = allowed_roots()
    s = st.session_state
    problems: list[Problem] = []
    try:
        folder = resolve_in_roots(s["b_folder"], roots, what="workspace folder", must_exist=False)
    except SDEError as exc:
        show_problems([Problem("workspace folder", str(exc))])
        return
    if (folder / WORKSPACE_FILE).exists() and not s.get("b_overwrite"):
        show_problems(
            [
                Problem(
                    "workspace folder", f"{folder} already has a {WORKSPACE_FILE}: tick overwrite"
                )
            ]
        )
        return
    dataset = {"kind": s["b_kind"]}
    try:
        data_root = resolve_in_roots(
            s["b_root"], roots, what="dataset path", must_exist=s["b_kind"] != "mnist1d"
        )
    except SDEError as exc:
        problems.append(Problem("dataset.root", str(exc)))
        data_root = None
    if s.get("b_train_size"):
        dataset["train_size"] = int(s["b_train_size"])
    forget_name = ""
    if forget is None:
        problems.append(Problem("forget_indices", "upload the forget set (.npy, .txt or .json)"))
    else:
        try:
            suffix = Path(check_upload(forget.name, forget.size, INDEX_SUFFIXES)).suffix
            forget_name = f"forget{suffix.lower()}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / forget_name).write_bytes(forget.getvalue())
        except SDEError as exc:
            problems.append(Problem("forget_indices", str(exc)))
    if not uploads:
        problems.append(Problem("models", "upload at least one checkpoint"))
    entries = []
    for i, upload in enumerate(uploads):
        entry, found = _save_checkpoint_upload(
            upload, i, folder / "models", bool(s.get("b_trusted"))
        )
        problems += found
        if entry is not None:
            entries.append(entry)
    ws = Workspace(root=folder, dataset=dataset, forget_indices=forget_name or "forget.npy")
    ws.name = s.get("b_name", "").strip() or folder.name
    ws.models = entries
    if data_root is not None:
        ws.dataset["root"] = relative_to_workspace(ws, data_root)
    if not problems and forget_name and entries:
        problems = validate_workspace(ws, check_data=True)
    if any(p.severity == "error" for p in problems):
        show_problems(problems)
        return
    write_workspace(ws)
    s[WS_KEY] = str(folder)
    show_problems(problems)
    st.success(f"Saved {folder / WORKSPACE_FILE} and opened it.")


def build_section() -> None:
    """Widgets to build a workspace from a dataset folder and uploaded files."""
    roots = allowed_roots()
    st.caption("Allowed folders for data and workspaces: " + ", ".join(f"`{r}`" for r in roots))
    a, b = st.columns(2)
    a.text_input("New workspace folder", key="b_folder", placeholder="workspaces/my-audit")
    b.text_input("Name", key="b_name")
    a.selectbox("Dataset kind", DATASET_KINDS, key="b_kind")
    b.text_input(
        "Dataset folder or file",
        key="b_root",
        placeholder="/usr/share/datasets/fashion-mnist",
        help="Must lie inside the allowed folders; nothing is downloaded.",
    )
    a.number_input("Training subset size (0 = all)", min_value=0, step=1000, key="b_train_size")
    forget = b.file_uploader(
        "Forget set: indices into the training split", type=[s[1:] for s in INDEX_SUFFIXES]
    )
    uploads = st.file_uploader(
        f"Checkpoints (.pt, .pth, .safetensors; at most {MAX_UPLOAD_MB} MiB each)",
        type=[s[1:] for s in CHECKPOINT_SUFFIXES],
        accept_multiple_files=True,
    )
    for i, upload in enumerate(uploads or []):
        name_col, role_col, method_col, arch_col = st.columns(4)
        stem = safe_name(upload.name).rsplit(".", 1)[0]
        name_col.text_input(f"Name of {upload.name}", value=stem, key=f"b_model_name_{i}")
        role = guess_role(stem)
        role_col.selectbox("Role", ROLES, index=ROLES.index(role), key=f"b_model_role_{i}")
        method_col.text_input("Method", value=stem, key=f"b_model_method_{i}")
        arch_col.selectbox(
            "Architecture", [AUTO_ARCH, *sorted(ARCHITECTURES)], key=f"b_model_arch_{i}"
        )
    trusted = st.checkbox(
        "Trusted pickle: allow full-pickle checkpoints",
        key="b_trusted",
        help="Checkpoints normally load with weights_only (no code runs).",
    )
    if trusted:
        st.warning(
            "A full pickle can run arbitrary code while it loads. Tick this only for files you "
            "created yourself; they are loaded once and re-saved as .safetensors."
        )
    st.checkbox("Overwrite an existing workspace.toml", key="b_overwrite")
    if st.button("Validate and save workspace.toml", type="primary", key="b_save"):
        build_workspace(list(uploads or []), forget)


st.title("Workspace")
st.session_state.setdefault(WS_KEY, default_workspace())
show_current(st.session_state[WS_KEY])
open_tab, build_tab = st.tabs(["Open another workspace", "Build a new workspace"])
with open_tab:
    open_section()
with build_tab:
    build_section()
