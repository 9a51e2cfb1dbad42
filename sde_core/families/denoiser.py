"""The denoiser family: an EDM denoiser ``D(x; σ)``, an ``EDMDenoiser`` of inputs/denoisers.

Its layers are read at noise levels, ``<layer>@<σ_t>`` (method §14: the model denoises
``y + σ_t·ε(y)`` with one fixed probe noise per sample); its output alias is ``denoised``, the
flattened denoised image; it trains with the EDM loss and has no classes, so the label-based
unlearning methods refuse it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sde_core.families.base import ArchitectureEntry, BehaviourMeasure

__all__ = ["DENOISER", "DenoiserFamily"]


@dataclass(frozen=True)
class DenoiserFamily:
    """The denoiser family (see :class:`sde_core.families.base.Family`)."""

    name: str = "denoiser"
    label: str = "denoiser"
    arch: str | None = None
    architectures: tuple[ArchitectureEntry, ...] = ()
    default_layer: str = "denoised@0.5"
    prediction_layer: str | None = None
    probes_at_noise_levels: bool = True
    has_class_outputs: bool = False
    #: its linear layers embed the noise level: no classifier aliases, only its output image
    #: (``denoised``: :data:`sde_core.inputs.denoisers.DENOISED`; a test checks they agree)
    output_aliases: Mapping[str, str] | None = field(default_factory=lambda: {"denoised": ":flat"})
    objective: str = "edm"
    objective_by: str = "sde_core.learning.diffusion.edm_loss"
    methods: frozenset[str] | None = frozenset({"retrain", "ft", "ga", "neggrad_plus", "l1_sparse"})
    refusals: Mapping[str, str] = field(
        default_factory=lambda: {
            "rl": "it has no class labels to randomise",
            "salun": "its saliency and updates are random-label cross-entropy",
            "unroll": "its one step needs an exact, noise-free loss gradient",
        }
    )
    behaviour: tuple[BehaviourMeasure, ...] = (
        BehaviourMeasure(
            "denoising_loss", "denoising-loss gap D_f − D_te at each noise level σ_t (Welch "
            "interval), and against the retrained model",
            "sde_core.learning.diffusion.denoising_losses",
        ),
        BehaviourMeasure(
            "behaviour_check", "conflicting evidence: SDE says forgotten, the model still "
            "denoises D_f better than the retrained model does at the evaluated σ_t",
            "sde_core.pipeline.evaluation.behaviour.behaviour_conflict",
        ),
    )  # fmt: skip
    input_views: tuple[str, ...] = ("noisy and denoised images",)
    verdict_note: str = ""
    advice: Mapping[str, str] = field(
        default_factory=lambda: {
            "weak_layer": "Try another layer or noise level σ_t, another σ, a larger subset "
            "size n or more splits K.",
            "weak_output": "Try another noise level σ_t, another σ, a larger subset size n or "
            "more splits K.",
            "refused_method": "use retrain, ft, ga, neggrad_plus or l1_sparse (method §14)",
        }
    )

    def detects(self, model: object) -> bool:
        """Whether ``model`` is an :class:`EDMDenoiser` (layers need a noise level ``@σ_t``)."""
        from sde_core.inputs.denoisers import EDMDenoiser  # torch: only once a model exists

        return isinstance(model, EDMDenoiser)

    def detects_folder(self, folder: Path) -> bool:
        """Never: a denoiser's checkpoint is a file."""
        return False


#: The denoiser family.
DENOISER = DenoiserFamily()
