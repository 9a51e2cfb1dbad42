"""The classifier family: a model whose output is a vector of class scores.

The default family: every model no other family detects is a classifier (registry order,
:data:`sde_core.families.registry.FAMILIES`). Its layers are the softmax ``output``, the
``logits``, the ``penultimate`` features and the registered presets of its architecture
(:func:`sde_core.inputs.architectures.model_layer_refs`); it trains with cross-entropy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sde_core.families.base import ArchitectureEntry, BehaviourMeasure

__all__ = ["CLASSIFIER", "ClassifierFamily"]


@dataclass(frozen=True)
class ClassifierFamily:
    """The classifier family (see :class:`sde_core.families.base.Family`)."""

    name: str = "classifier"
    label: str = "classifier"
    arch: str | None = None
    architectures: tuple[ArchitectureEntry, ...] = ()
    default_layer: str = "output"
    prediction_layer: str | None = None
    probes_at_noise_levels: bool = False
    has_class_outputs: bool = True
    output_aliases: Mapping[str, str] | None = None
    objective: str = "cross_entropy"
    objective_by: str = "torch.nn.functional.cross_entropy"
    methods: frozenset[str] | None = frozenset(
        {"retrain", "ft", "ga", "rl", "salun", "l1_sparse", "unroll", "neggrad_plus", "eu_k"}
    )
    refusals: Mapping[str, str] = field(default_factory=dict)
    behaviour: tuple[BehaviourMeasure, ...] = (
        BehaviourMeasure(
            "accuracy", "accuracy on D_r, D_f and D_te (%)",
            "sde_core.learning.metrics.accuracy_from_probs",
        ),
        BehaviourMeasure(
            "attack", "membership-inference attack success rate on D_f (MIA ASR, %)",
            "sde_core.learning.metrics.mia_asr_from_probs",
        ),
        BehaviourMeasure(
            "behaviour_check", "D_f against D_te: accuracy and confidence gaps",
            "sde_core.learning.metrics.behaviour_check",
        ),
        BehaviourMeasure(
            "loss", "mean cross-entropy on D_f − on D_te (nats, Welch interval)",
            "sde_core.learning.metrics.behaviour_check",
        ),
    )  # fmt: skip
    input_views: tuple[str, ...] = ("thumbnails", "curves")
    verdict_note: str = ""
    advice: Mapping[str, str] = field(
        default_factory=lambda: {
            "weak_layer": "Try another layer (the softmax `output` is usually strongest), another "
            "σ, a larger subset size n or more splits K.",
            "weak_output": "Try another σ, a larger subset size n or more splits K (this layer, "
            "the softmax `output`, is usually the strongest).",
        }
    )

    def detects(self, model: object) -> bool:
        """Every model: the registry asks the classifier last."""
        return True

    def detects_folder(self, folder: Path) -> bool:
        """Never: a classifier's checkpoint is a file."""
        return False


#: The classifier family.
CLASSIFIER = ClassifierFamily()
