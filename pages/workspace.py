"""Workspace page: open the demo or a folder, review its problems, build one from uploads or add
a model. Widgets and layout only: every check and every write is in
:mod:`sde_core.services.uploads` (staged, all-or-nothing)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pandas as pd
import streamlit as st
from streamlit.runtime.uploaded_file_manager import UploadedFile

from pages._common import PAGES, WS_KEY, app_root, default_workspace, guarded
from sde_core.common.markdown_text import md_literal, md_plain
from sde_core.common.paths import ROOTS_ENV, allowed_roots, env_roots, resolve_in_roots
from sde_core.errors import InputError, SDEError
from sde_core.services.uploads import (
    ACTIVATION_SUFFIXES,
    MAX_UPLOAD_MB,
    BuildRequest,
    BuildResult,
    Upload,
    add_uploaded_model,
    build_from_uploads,
    inspect_upload,
    safe_name,
)
from sde_core.services.workspace_info import (
    ARCHITECTURES,
    CHECKPOINT_SUFFIXES,
    DATASET_KINDS,
    DEFAULT_TIME_LIMIT,
    INDEX_SUFFIXES,
    ROLES,
    WORKSPACE_FILE,
    Problem,
    load_workspace,
    validate_workspace,
)
from sde_core.services.workspace_models import ModelSpec, guess_role
from sde_core.viz.ui_support import field_label, problems_by_field

AUTO_ARCH = "(read from the file)"
MODEL_TYPES = sorted({s.rsplit(".", 1)[-1] for s in CHECKPOINT_SUFFIXES + ACTIVATION_SUFFIXES})


#: The build form's fields, named by their widgets' labels (the keys of its problems).
BUILD_LABELS = {
    "workspace folder": "New workspace folder",
    "dataset": "Dataset folder or file",
    "forget_indices": "Forget set",
    "models": "Models",
    "defaults": "Evaluation defaults",
}
#: The guide to bringing one's own models and data, and the section the build form opens at.
GUIDE = "docs/bring-your-own.md"
GUIDE_START = "Where files may live: the path policy"


def build_label(field: str) -> str:
    """A build problem's field as the form names it (``"checkpoint a.pt"`` → ``"Model file
    a.pt"``); the workspace's own fields as :func:`field_label` names them."""
    if field in BUILD_LABELS:
        return BUILD_LABELS[field]
    kind, _, name = field.partition(" ")
    if kind in ("checkpoint", "activations", "model") and name:
        return f"Model file {name}"
    return field_label(field)


def show_problems(problems: list[Problem], label: Callable[[str], str] = field_label) -> None:
    """Every problem at once, one inline message per field named by its label: an error if any
    of its problems is one, else a warning."""
    for field, found in problems_by_field(problems).items():
        text = f"**{md_plain(label(field))}** — " + " · ".join(md_plain(p.message) for p in found)
        (st.error if any(p.severity == "error" for p in found) else st.warning)(text)


def show_result(
    result: BuildResult, success: str, label: Callable[[str], str] = field_label
) -> None:
    """The outcome of a build or an addition: the dataset path as resolved, every problem, or
    success with the notes."""
    if result.dataset_path is not None:
        st.info(f"Dataset folder or file: {md_literal(result.dataset_path)}")
    errors = sum(p.severity == "error" for p in result.problems)
    if errors > 1:
        st.markdown(f"**{errors} problems to fix** — nothing was written:")
    show_problems(result.problems, label)
    if result.saved:
        st.success(success + ("\n\n" + "\n".join(f"- {n}" for n in result.notes)))


def guide_sections() -> dict[str, str]:
    """The ``## `` sections of the guide (title → markdown), code blocks left whole."""
    doc = app_root() / GUIDE
    if not doc.is_file():
        return {}
    sections: dict[str, list[str]] = {}
    title, fenced = "Bring your own model", False
    for line in doc.read_text(encoding="utf-8").splitlines():
        fenced ^= line.startswith("```")
        if not fenced and line.startswith("## "):
            title = line[3:].strip()
            continue
        if not fenced and line.startswith("# "):
            continue
        sections.setdefault(title, []).append(line)
    return {t: "\n".join(lines).strip() for t, lines in sections.items()}


def guide_section() -> None:
    """The guide, offline: its sections to choose from, opened at the path policy."""
    sections = guide_sections()
    with st.expander(f"Guide: bringing your own models and data ({GUIDE})"):
        if not sections:
            st.warning(f"{GUIDE} is missing: the guide ships with the repository (docs/).")
            return
        titles = list(sections)
        start = titles.index(GUIDE_START) if GUIDE_START in titles else 0
        chosen = st.selectbox("Section", titles, index=start, key="guide_section")
        st.markdown(sections[chosen])


def show_current(path: str) -> None:
    """Summary of the open workspace with its validation problems."""
    try:
        ws = load_workspace(path, validate=False)
    except SDEError as exc:
        st.error(f"Cannot read the workspace {md_literal(path)}: {md_plain(exc)}")
        return
    st.subheader(f"Open: {md_plain(ws.name or ws.root.name)}")
    where = md_literal(ws.root)
    st.caption(f"{where} · {md_plain(ws.description)}" if ws.description else where)
    left, right = st.columns([2, 3])
    with left:
        st.markdown("**Dataset**")
        st.json(ws.dataset, expanded=False)
        st.markdown(f"**Forget set:** {md_literal(ws.forget_indices)}")
        defaults = ", ".join(f"{k} = {v}" for k, v in dataclasses.asdict(ws.defaults).items())
        st.markdown(f"**Defaults:** {md_plain(defaults)}")
    with right:
        st.markdown(f"**Models** ({len(ws.models)})")
        rows = [
            {
                "name": m.name,
                "role": m.role,
                "method": m.method,
                "arch": m.arch or "(from the file)",
                "file": m.checkpoint or m.activations,
                "trusted": m.trusted,
                "checkpoints during training": len(m.checkpoints),
            }
            for m in ws.models
        ]
        st.dataframe(pd.DataFrame(rows), hide_index=True)
    problems = validate_workspace(ws)
    show_problems(problems)
    if not any(p.severity == "error" for p in problems):
        st.success(f"The workspace is valid: {len(ws.models)} models.")
        st.page_link(PAGES["explore"], label="Explore a model", icon=":material/query_stats:")


def open_section() -> None:
    """Buttons for the bundled demos and a folder field checked against the allowed roots."""
    found = (app_root() / "assets").glob(f"*/{WORKSPACE_FILE}")
    demos = sorted((p.parent for p in found), key=lambda d: (d.name != "demo", d.name))
    cols = st.columns(max(1, len(demos)))
    for col, demo in zip(cols, demos, strict=False):
        if col.button(f"Open the bundled {demo.name}", key=f"open_{demo.name}"):
            st.session_state[WS_KEY] = str(demo)
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


def _kwargs(key: str) -> dict[str, Any]:
    """The JSON object typed into an "architecture kwargs" field ({} when empty)."""
    text = st.session_state.get(key, "").strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict):
        raise InputError('architecture kwargs must be a JSON object, e.g. {"num_classes": 4}')
    return value


def model_widgets(upload: UploadedFile, prefix: str, suffix: str = "") -> None:
    """Name, role, method, architecture, kwargs and the per-file trusted box of one upload
    (widget keys ``{prefix}_{field}{suffix}``)."""
    stem = safe_name(upload.name).split(".", 1)[0]
    info = inspect_upload(upload.name, upload.getvalue())
    name_col, role_col, method_col, arch_col, kw_col = st.columns([3, 2, 2, 3, 3])
    name_col.text_input(f"Name of {upload.name}", value=stem, key=f"{prefix}_name{suffix}")
    role = guess_role(stem)
    role_col.selectbox("Role", ROLES, index=ROLES.index(role), key=f"{prefix}_role{suffix}")
    method_col.text_input("Method", value=stem, key=f"{prefix}_method{suffix}")
    arch_col.selectbox(
        "Architecture", [AUTO_ARCH, *sorted(ARCHITECTURES)], key=f"{prefix}_arch{suffix}"
    )
    kw_col.text_input(
        "Architecture kwargs (JSON)", key=f"{prefix}_kwargs{suffix}", placeholder="{}"
    )
    st.text_input(
        "Other architecture (overrides the list)",
        key=f"{prefix}_arch_other{suffix}",
        placeholder="torchvision:resnet50 · timm:mobilenetv3_small_100 · file:nets.py:MyCNN",
        help="torchvision:NAME or timm:NAME (the optional timm extra), or your own class: "
        "file:PATH.py:CLASS with PATH relative to the workspace folder. A file: class is code: "
        "it runs only when Trusted is ticked, and its SHA-256 is recorded.",
    )
    st.checkbox(
        f"Trusted: I created {upload.name} or know where it comes from",
        key=f"{prefix}_trusted{suffix}",
        help="Allows a TorchScript archive, a full pickle or a file: architecture, which can "
        "run code while it loads; recorded as trusted = true on this model and, by SHA-256, in "
        "your local trust store (a workspace received from someone else trusts nothing).",
    )
    st.checkbox(
        "Check its accuracy (an original or retrained classifier)",
        value=True,
        key=f"{prefix}_accuracy{suffix}",
        help="Runs the model on a sample of D_r and refuses it when it is no better than chance: "
        "a model read with other preprocessing than it was trained with (normalisation, image "
        "size, channel order) would otherwise give numbers about nothing. Untick only for a "
        "model that really is this inaccurate (`--no-accuracy-check` on the command line).",
    )
    if st.session_state.get(f"{prefix}_trusted{suffix}"):
        st.number_input(
            "Time limit for this trusted file (seconds)",
            min_value=1.0,
            value=DEFAULT_TIME_LIMIT,
            step=10.0,
            key=f"{prefix}_limit{suffix}",
            help="A trusted file is loaded and run on two samples in a separate process, never "
            "in this server. A step that takes longer than this is stopped, together with every "
            "process the file started; its memory is capped too. Evaluations use the same "
            f"default ({DEFAULT_TIME_LIMIT:g} s per step; `--time-limit` on the command line).",
        )
    if info.needs_trust and not st.session_state.get(f"{prefix}_trusted{suffix}"):
        st.warning(
            f"{upload.name} is a TorchScript archive: loading it runs the code inside. It will "
            "not be loaded unless you tick Trusted for this file."
        )


def model_spec(prefix: str, suffix: str = "") -> ModelSpec:
    """The :class:`ModelSpec` of the widgets drawn by :func:`model_widgets`."""
    s = st.session_state
    arch = str(s.get(f"{prefix}_arch_other{suffix}", "") or "").strip() or s.get(
        f"{prefix}_arch{suffix}", AUTO_ARCH
    )
    return ModelSpec(
        name=s.get(f"{prefix}_name{suffix}", "").strip(),
        role=s.get(f"{prefix}_role{suffix}", ""),
        method=s.get(f"{prefix}_method{suffix}", "").strip(),
        arch=None if arch == AUTO_ARCH else arch,
        arch_kwargs=_kwargs(f"{prefix}_kwargs{suffix}"),
        trusted=bool(s.get(f"{prefix}_trusted{suffix}")),
        time_limit=s.get(f"{prefix}_limit{suffix}"),
        check_accuracy=bool(s.get(f"{prefix}_accuracy{suffix}", True)),
    )


def build_section() -> None:
    """Widgets to build a workspace from a dataset folder and uploaded files."""
    page_roots = allowed_roots()
    st.caption(
        "Step by step, with the formats each kind of model and dataset accepts: the guide "
        f"below ({GUIDE}; the command line builds the same workspace: "
        "`python -m sde_core workspace init`)."
    )
    guide_section()
    st.caption(
        "New workspaces go inside: " + ", ".join(f"`{r}`" for r in page_roots) + ". The data "
        f"must lie inside the new workspace folder or a folder of `{ROOTS_ENV}` "
        f"({', '.join(f'`{r}`' for r in env_roots()) or 'unset'})."
    )
    a, b = st.columns(2)
    a.text_input("New workspace folder", key="b_folder", placeholder="workspaces/my-audit")
    b.text_input("Name", key="b_name")
    a.selectbox("Dataset kind", DATASET_KINDS, key="b_kind")
    b.text_input(
        "Dataset folder or file",
        key="b_root",
        placeholder="/usr/share/datasets/fashion-mnist",
        help=f"Taken as typed: absolute, or relative to `{page_roots[0]}` (like the workspace "
        f"folder); it must lie inside the new workspace folder or {ROOTS_ENV}. The absolute "
        "path it resolves to is shown when you save. Nothing is downloaded.",
    )
    a.number_input("Training subset size (0 = all)", min_value=0, step=1000, key="b_train_size")
    forget = b.file_uploader(
        "Forget set: indices into the training split (or a boolean mask)",
        type=[s[1:] for s in INDEX_SUFFIXES],
    )
    uploads = st.file_uploader(
        f"Models: checkpoints ({', '.join(CHECKPOINT_SUFFIXES)}) or activations files "
        f"({', '.join(ACTIVATION_SUFFIXES)}); at most {MAX_UPLOAD_MB} MiB each",
        type=MODEL_TYPES,
        accept_multiple_files=True,
    )
    for i, upload in enumerate(uploads or []):
        model_widgets(upload, "b_model", f"_{i}")
    st.checkbox("Overwrite an existing workspace.toml", key="b_overwrite")
    if st.button("Validate and save workspace.toml", type="primary", key="b_save"):
        s = st.session_state
        with guarded("Cannot build the workspace"):
            form_problems: list[Problem] = []
            models = []
            for i, u in enumerate(uploads or []):
                try:
                    spec = model_spec("b_model", f"_{i}")
                except InputError as exc:  # reported with every other problem
                    form_problems.append(Problem(f"model {u.name}", str(exc)))
                    continue
                models.append((Upload(u.name, u.getvalue()), spec))
            request = BuildRequest(
                folder=s.get("b_folder", ""),
                dataset_kind=s["b_kind"],
                dataset_path=s.get("b_root", ""),
                forget=None if forget is None else Upload(forget.name, forget.getvalue()),
                models=models,
                name=s.get("b_name", ""),
                train_size=int(s.get("b_train_size") or 0) or None,
                overwrite=bool(s.get("b_overwrite")),
                form_problems=form_problems,
            )
            result = build_from_uploads(request, page_roots)
            if result.saved:
                s[WS_KEY] = str(result.folder)
            show_result(
                result, f"Saved {result.folder} / {WORKSPACE_FILE} and opened it.", build_label
            )


def add_section(path: str) -> None:
    """Widgets to add one checkpoint or activations file to the open workspace."""
    st.caption(
        f"Adds a model to the open workspace {md_literal(path)} (its file goes to models/NAME/)."
    )
    upload = st.file_uploader(
        f"Checkpoint ({', '.join(CHECKPOINT_SUFFIXES)}) or activations file "
        f"({', '.join(ACTIVATION_SUFFIXES)})",
        type=MODEL_TYPES,
        key="a_upload",
    )
    if upload is None:
        return
    model_widgets(upload, "a_model")
    st.checkbox("Replace a model of the same name", key="a_replace")
    if st.button("Check and add the model", type="primary", key="a_save"):
        with guarded("Cannot add the model"):
            result = add_uploaded_model(
                path,
                Upload(upload.name, upload.getvalue()),
                model_spec("a_model"),
                replace=bool(st.session_state.get("a_replace")),
            )
            show_result(result, f"Added the model to {path}.")


st.title("Workspace")
st.session_state.setdefault(WS_KEY, default_workspace())
show_current(st.session_state[WS_KEY])
open_tab, build_tab, add_tab = st.tabs(
    ["Open another workspace", "Build a new workspace", "Add a model"]
)
with open_tab:
    open_section()
with build_tab:
    build_section()
with add_tab:
    add_section(st.session_state[WS_KEY])
