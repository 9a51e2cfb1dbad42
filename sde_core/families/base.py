"""The :class:`Family` protocol every model family answers, and what its answers are made of.

A family is a frozen dataclass instance (one per module of :mod:`sde_core.families`) with the
attributes and the two detection methods below. This layer sits with ``inputs/`` (layer 2), so
the activation extraction can ask it; what a family names from the layers above (its training
loss, its behaviour measures) it names by the dotted path of the existing function that
computes it (a string, so this layer imports nothing above it); ``tests/families`` checks
that every such path names a function.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

__all__ = ["OBJECTIVES", "ArchitectureEntry", "BehaviourMeasure", "Family"]

#: The training objectives a family may declare: cross-entropy on class scores, the EDM
#: denoising loss (Karras et al. 2022), the next-token negative log-likelihood of a text, the
#: mean squared error of a regression target.
OBJECTIVES = ("cross_entropy", "edm", "next_token_nll", "mse")


@dataclass(frozen=True)
class BehaviourMeasure:
    """One behaviour measure of a family (what the model does, beside SDE's dependence).

    Attributes:
        key: identifier, e.g. ``"accuracy"``.
        label: what the user reads, e.g. ``"accuracy on D_r, D_f and D_te"``.
        computed_by: dotted path of the function that computes it today, e.g.
            ``"sde_core.learning.metrics.accuracy_from_probs"``; "" when nothing computes it
            yet (then ``pending`` says which issue will).
        pending: why it is declared but not computed yet ("" when it is computed).
    """

    key: str
    label: str
    computed_by: str
    pending: str = ""


@dataclass(frozen=True)
class ArchitectureEntry:
    """An architecture a family brings to the registry (:data:`~sde_core.inputs.architectures.
    ARCHITECTURES` registers it as an ``ArchSpec`` under ``name``), so a workspace model of the
    family is built by name (``arch = "signal_mlp"``) and known as the family's without loading.

    Attributes:
        name: registry key (a workspace's ``arch``).
        builder: returns a fresh, randomly initialised ``nn.Module`` (imports torch itself, so
            the family stays torch-free when imported).
        default_kwargs: the builder's keyword arguments when none are given.
        input_shape: per-sample input shape for the default kwargs, e.g. ``(16,)``.
        layer_presets: alias -> layer reference string (``{"hidden": "hidden"}``).
        description: one line for the UI.
    """

    name: str
    builder: Callable[..., Any]
    default_kwargs: Mapping[str, Any]
    input_shape: tuple[int, ...]
    layer_presets: Mapping[str, str] = field(default_factory=dict)
    description: str = ""


class Family(Protocol):
    """What the library asks about a kind of model.

    Attributes:
        name: identifier (``"classifier"``, ``"denoiser"``, ``"causal_lm"``).
        label: the user's word for it (``"causal language model"``).
        arch: the workspace ``arch`` naming this family's whole route, whose checkpoints are
            model folders (a Hugging Face folder: ``"hf"``); None when its architectures come
            from the architecture registry.
        architectures: the architectures it adds to the registry (none: its models come from
            the built-in registry, a model folder or a ``file:`` class).
        default_layer: the layer evaluated when the workspace names none of its own (the
            family's strongest, e.g. the softmax ``output``).
        prediction_layer: for a family without class outputs, the layer whose value captions
            each input shown (a regressor's ``prediction``); None: the softmax ``output`` (a
            classifier) or the family's own view.
        probes_at_noise_levels: layers are named ``<layer>@<σ_t>`` and read on noisy inputs
            (method §14); the forward pass takes the noise level.
        has_class_outputs: the model outputs class scores (softmax ``output``, accuracy, MIA).
        output_aliases: layer aliases of its output, replacing the classifier presets
            (``{"denoised": ":flat"}``); None: the classifier presets (or the model's own
            ``sde_layer_refs``).
        objective: its training loss, one of :data:`OBJECTIVES`.
        objective_by: dotted path of the function computing that loss.
        methods: the unlearning methods that apply (registry names); None: every method that
            does not refuse it.
        refusals: unlearning method → why it does not apply (shown in the method's error).
        behaviour: its behaviour measures.
        input_views: how its inputs are shown (``"thumbnails"``, ``"curves"``, ``"texts"``,
            ``"noisy and denoised images"``).
        verdict_note: a sentence every verdict on a model of this family carries ("" for
            none): what our measurements found of SDE on this family against its behaviour.
        advice: key → text the user reads; ``"weak_layer"``: what to try when the reference
            test does not separate at a layer (``{layer}`` is filled in),
            ``"weak_output"``: the same at its default (strongest) layer; ``"output_size"``:
            how a model's output width is named (``"hidden size {n}"``; default
            ``"{n} outputs"``).
    """

    @property
    def name(self) -> str: ...
    @property
    def label(self) -> str: ...
    @property
    def arch(self) -> str | None: ...
    @property
    def architectures(self) -> tuple[ArchitectureEntry, ...]: ...
    @property
    def default_layer(self) -> str: ...
    @property
    def prediction_layer(self) -> str | None: ...
    @property
    def probes_at_noise_levels(self) -> bool: ...
    @property
    def has_class_outputs(self) -> bool: ...
    @property
    def output_aliases(self) -> Mapping[str, str] | None: ...
    @property
    def objective(self) -> str: ...
    @property
    def objective_by(self) -> str: ...
    @property
    def methods(self) -> frozenset[str] | None: ...
    @property
    def refusals(self) -> Mapping[str, str]: ...
    @property
    def behaviour(self) -> tuple[BehaviourMeasure, ...]: ...
    @property
    def input_views(self) -> tuple[str, ...]: ...
    @property
    def advice(self) -> Mapping[str, str]: ...
    @property
    def verdict_note(self) -> str: ...

    def detects(self, model: object) -> bool:
        """Whether a loaded model (an ``nn.Module``) is of this family."""
        ...

    def detects_folder(self, folder: Path) -> bool:
        """Whether a model folder (not a checkpoint file) holds a model of this family."""
        ...
