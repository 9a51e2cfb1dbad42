"""What the answer page needs besides the evaluation: its scope and the workspace's family.

:func:`answer_scope` says what an answer covers (data, forget-set size, layer, σ, n, B, design,
seed); :func:`model_family` asks the model-family seam (:mod:`sde_core.families`) which family
the workspace's models are, for the texts that differ by family (:mod:`sde_core.viz.family_texts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sde_core.errors import SDEError
from sde_core.families.base import Family
from sde_core.families.registry import family_of_entry
from sde_core.inputs.data import DatasetBundle
from sde_core.inputs.indices import load_index_file
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.workspace import Workspace
from sde_core.viz.answer import Scope, make_scope

__all__ = ["answer_scope", "model_family", "verdict_notes", "workspace_family"]


def workspace_family(ws: Workspace) -> Family:
    """The workspace's model family (a :class:`~sde_core.families.registry.Family`): the
    family seam's answer for its first model, known by its ``arch`` and the default layer
    without loading it (every model of a workspace reads the same data, so they share a
    family); the classifier family for a workspace without models."""
    arch = ws.models[0].arch if ws.models else None
    return family_of_entry(arch, ws.defaults.layer)


def model_family(ws: Workspace) -> str:
    """The user's word for the workspace's model family (``"classifier"``, ``"denoiser"``,
    ``"causal language model"``; :func:`workspace_family`)."""
    return workspace_family(ws).label if ws.models else "classifier"


def verdict_notes(ws: Workspace, layer: str) -> dict[str, str]:
    """Each model's family verdict note (the family seam's ``verdict_note``: the sentence every
    verdict on that family carries), by model name; "" for a family without one."""
    return {e.name: family_of_entry(e.arch, layer).verdict_note for e in ws.models}


def answer_scope(
    ws: Workspace,
    settings: EvalSettings,
    bundle: DatasetBundle | None,
    models: int,
    draws: Sequence[Any] = (),
) -> Scope:
    """What an answer at ``settings`` covers.

    Args:
        bundle: the loaded dataset (None: its sizes are not shown).
        models: how many models the evaluation holds.
        draws: the reference draws each model ran (the ``models`` table's ``draws``).
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
    return make_scope(settings, data, forget, models, draws)
