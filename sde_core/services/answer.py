"""What the answer page needs besides the evaluation: its scope and the workspace's family.

:func:`answer_scope` says what an answer covers (data, forget-set size, layer, σ, n, B, design,
seed); :func:`model_family` is the one place that tells a classifier from a language model and
a denoiser for the texts that differ by family (:mod:`sde_core.viz.family_texts`) — kept in
one small function so it can move into a model-family seam.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from sde_core.errors import SDEError
from sde_core.inputs.data import DatasetBundle
from sde_core.inputs.indices import load_index_file
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.workspace import Workspace
from sde_core.viz.answer import Scope, make_scope

__all__ = ["Family", "answer_scope", "model_family"]

#: The model families whose texts differ.
Family = Literal["classifier", "language model", "denoiser"]


def model_family(ws: Workspace) -> Family:
    """The workspace's model family: a denoiser (architecture ``edm_unet``), a language model
    (a ``text`` dataset or a Hugging Face model) or a classifier (everything else)."""
    archs = {m.arch for m in ws.models}
    if "edm_unet" in archs:
        return "denoiser"
    if ws.dataset.get("kind") == "text" or "hf" in archs:
        return "language model"
    return "classifier"


def answer_scope(
    ws: Workspace, settings: EvalSettings, bundle: DatasetBundle | None, models: int
) -> Scope:
    """What an answer at ``settings`` covers.

    Args:
        bundle: the loaded dataset (None: its sizes are not shown).
        models: how many models the evaluation holds.
    """
    kind = str(ws.dataset.get("kind", "?"))
    data = f"{ws.name or ws.root.name} ({kind})"
    forget: int | None = None
    if bundle is not None:
        data += f": {len(bundle.train_labels)} training rows, {len(bundle.test_labels)} unseen"
        try:
            path = ws.path(ws.forget_indices)
            forget = int(np.unique(load_index_file(path, len(bundle.train_labels))).size)
        except SDEError:
            forget = None
    return make_scope(settings, data, forget, models)
