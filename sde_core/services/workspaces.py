"""Creating a workspace, for the command line and the dashboard (no UI code).

:func:`create_workspace` (``workspace init``, and the Workspace page's build form through
:func:`sde_core.services.uploads.build_from_uploads`) writes a new workspace: the dataset, the
forget set (a file, a random fraction, whole classes, or a text dataset's split or column) and
``[defaults]`` whose subset size fits the data. It is the one path that creates one. Its
neighbours do one thing each:

- :mod:`sde_core.services.workspace_models`: :func:`~sde_core.services.workspace_models.add_model`
  (``workspace add-model``) adds an existing checkpoint or activations file;
- :mod:`sde_core.services.uploads`: checks of uploaded files and the Workspace page's build and
  add forms;
- :mod:`sde_core.services.sizing`: whether a model fits the data and what subset size it allows.

Every write is staged and committed at once
(:func:`~sde_core.pipeline.workspace_write.commit_files`): a rejected request changes nothing on
disk. Every file is checked under the path policy (:mod:`sde_core.common.paths`).
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.common.paths import check_path_text, env_roots
from sde_core.errors import DataError, SDEError, SettingsError, WorkspaceError
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.workspace import WORKSPACE_FILE, Workspace
from sde_core.pipeline.workspace_write import commit_files, relative_to_workspace, workspace_toml
from sde_core.services.preprocessing import preprocessing_text
from sde_core.services.sizing import _size_reason, null_check_warning, suggest_subset_size
from sde_core.stats.class_mix import class_mix_reason

__all__ = [
    "CreatedWorkspace",
    "create_workspace",
]


# ------------------------------------------------------------------------------- checks


# ------------------------------------------------------------------------------- init


@dataclass
class CreatedWorkspace:
    """What :func:`create_workspace` made.

    Attributes:
        workspace: the new workspace (written). n_train, n_test, n_forget: row counts.
        notes: sentences for the user (the chosen subset size, the default layer...).
    """

    workspace: Workspace
    n_train: int
    n_test: int
    n_forget: int
    notes: list[str] = field(default_factory=list)


def _roots(roots: Iterable[str | Path] | None) -> tuple[Path, ...]:
    return tuple(Path(r).resolve() for r in roots) if roots is not None else tuple(env_roots())


def _npy_bytes(arr: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(arr, dtype=np.int64))
    return buffer.getvalue()


def create_workspace(
    folder: str | Path,
    dataset: Mapping[str, Any],
    *,
    forget: str | None = None,
    random_forget: float | None = None,
    forget_classes: Sequence[int | str] | None = None,
    forget_split: str | None = None,
    forget_column: str | None = None,
    seed: int = 0,
    name: str = "",
    description: str = "",
    defaults: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    roots: Iterable[str | Path] | None = None,
) -> CreatedWorkspace:
    """Create a workspace (no models yet), all files at once.

    Args:
        folder: the new workspace folder.
        dataset: the ``[dataset]`` table (paths relative to ``folder`` or absolute).
        forget, random_forget, forget_classes, forget_split, forget_column: exactly one: an
            index file (relative to ``folder``), a fraction of D_tr drawn with ``seed``, class
            ids/names, or for a text dataset a split file of records (relative to ``folder``;
            TOFU's ``forget10.json``) or a true/false column of D_tr
            (:func:`sde_core.inputs.text_data.forget_rows`); the last four are written to
            ``forget.npy``.
        defaults: ``[defaults]`` values; ``subset_size`` (unless given) is chosen with
            :func:`suggest_subset_size`, ``layer`` of an activations dataset from its file.
        roots: allowed folders besides ``folder`` (default ``$SDE_DATA_ROOTS``).

    Raises:
        WorkspaceError, DataError, SettingsError: invalid inputs; nothing was written.
    """
    from sde_core.inputs.data import load_dataset
    from sde_core.inputs.indices import class_indices, load_index_file

    try:
        root = Path(check_path_text(folder, "workspace folder")).resolve()
    except SDEError as exc:
        raise WorkspaceError(str(exc)) from None
    if (root / WORKSPACE_FILE).exists() and not overwrite:
        raise WorkspaceError(
            f"{root / WORKSPACE_FILE} already exists: pass overwrite to replace it"
        )
    given = [
        x is not None for x in (forget, random_forget, forget_classes, forget_split, forget_column)
    ]
    if sum(given) > 1:
        raise SettingsError(
            "give exactly one forget set: an index file, a random fraction, classes, or for "
            "text a split file or a column"
        )
    ws = Workspace(
        root=root, dataset=dict(dataset), forget_indices=forget or "forget.npy", name=name,
        description=description, roots=_roots(roots),
    )  # fmt: skip
    bundle = load_dataset(ws.dataset_spec())
    n_train, n_test = len(bundle.train_labels), len(bundle.test_labels)
    files: dict[str, bytes | Path] = {}
    file_mask = None if bundle.precomputed is None else bundle.precomputed.forget_mask
    notes = []
    if bundle.spec.kind not in ("text", "activations"):
        notes.append(f"models get {preprocessing_text(bundle)}: match the training's")
    if not any(given):
        if file_mask is None:
            raise SettingsError(
                "give exactly one forget set: an index file (--forget), a random fraction "
                "(--random-forget), classes (--forget-class), or for text a split file "
                "(--forget-split) or a column (--forget-column); an activations dataset may "
                "also carry it as a 'forget' mask or 'forget_idx' array"
            )
        idx = np.flatnonzero(file_mask).astype(np.int64)
        files["forget.npy"] = _npy_bytes(idx)
        notes.append(f"forget set: the {idx.size} rows the activations file marks as forget")
    elif forget is not None:
        idx = load_index_file(ws.path(forget, what="forget set", must_exist=True), n_train)
    elif forget_split is not None or forget_column is not None:
        from sde_core.inputs.text_data import TextDataset, forget_rows

        if not isinstance(bundle.train, TextDataset):
            raise SettingsError(
                "a forget split file or column is for text datasets (kind = 'text'); give an "
                "index file, a random fraction or classes"
            )
        split_path = (
            None
            if forget_split is None
            else ws.path(forget_split, what="forget split", must_exist=True)
        )
        idx = forget_rows(
            bundle.train, ws.dataset_spec().options, split_file=split_path, column=forget_column
        )
        files["forget.npy"] = _npy_bytes(idx)
    elif random_forget is not None:
        if isinstance(random_forget, bool) or not 0.0 < float(random_forget) < 1.0:
            raise SettingsError(
                f"random forget fraction {random_forget} must be in (0, 1), e.g. 0.2"
            )
        k = max(1, round(float(random_forget) * n_train))
        idx = np.sort(np.random.default_rng(seed).choice(n_train, size=k, replace=False))
        files["forget.npy"] = _npy_bytes(idx)
    else:
        idx = class_indices(bundle.train_labels, list(forget_classes or []), bundle.class_names)
        files["forget.npy"] = _npy_bytes(idx)
    if idx.size >= n_train:
        raise DataError("the forget set holds every training row: D_r would be empty")
    mix = class_mix_reason(
        bundle.train_labels, bundle.test_labels, idx, bundle.num_classes, bundle.class_names
    )
    if mix:
        notes.append(f"note: a class-wise forget set, judged by the class-matched test: {mix}")
    values = dict(defaults or {})
    if bundle.precomputed is not None and "layer" not in values:
        layers = bundle.precomputed.layers
        values["layer"] = "output" if "output" in layers else layers[0]
        notes.append(f"default layer {values['layer']!r} (the file holds {', '.join(layers)})")
    base = EvalSettings.from_mapping(values)
    if "subset_size" not in values:
        size = suggest_subset_size(n_train, n_test, idx, base)
        base = dataclasses.replace(base, subset_size=size)
        notes.append(_size_reason(size, n_train, n_test, int(idx.size)))
    warning = null_check_warning(base.subset_size, n_test)
    if warning is not None:
        notes.append(warning)
    ws.defaults = base
    if "root" in ws.dataset:
        ws.dataset["root"] = relative_to_workspace(ws, ws.dataset_spec().root)
    files[WORKSPACE_FILE] = workspace_toml(ws).encode()
    commit_files(root, files)
    return CreatedWorkspace(ws, n_train, n_test, int(idx.size), notes)


# ------------------------------------------------------------------------------- add-model


# ------------------------------------------------------------------------------- uploads
