"""The 1-D signal regressor family: a model mapping a signal ``(d,)`` to one real number.

The smallest family, and the template for a new one: a model declares it by its attribute
``sde_family = "signal_regressor"`` and names its hidden layer ``hidden``. Its layers are
``prediction`` (the model's output, ``(N, 1)``) and ``hidden`` (that module's output); it has
no classes (no softmax ``output``, no accuracy or membership attack), trains with the mean
squared error and no unlearning method of the registry applies to it yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sde_core.families.base import BehaviourMeasure

__all__ = ["SIGNAL_REGRESSOR", "SignalRegressorFamily"]


@dataclass(frozen=True)
class SignalRegressorFamily:
    """The 1-D signal regressor family (see :class:`sde_core.families.base.Family`)."""

    name: str = "signal_regressor"
    label: str = "1-D signal regressor"
    arch: str | None = None
    probes_at_noise_levels: bool = False
    has_class_outputs: bool = False
    output_aliases: Mapping[str, str] | None = field(
        default_factory=lambda: {"prediction": "", "hidden": "hidden"}
    )
    objective: str = "mse"
    objective_by: str = "torch.nn.functional.mse_loss"
    methods: frozenset[str] | None = frozenset()
    refusals: Mapping[str, str] = field(
        default_factory=lambda: {
            "rl": "it has no class labels to randomise",
            "salun": "it has no class labels to randomise",
            "unroll": "its training loss is not the registry's cross-entropy",
        }
    )
    behaviour: tuple[BehaviourMeasure, ...] = (
        BehaviourMeasure(
            "prediction_error", "mean squared error on D_f and D_te", "",
            pending="a behaviour cross-check for every family (a later issue)",
        ),
    )  # fmt: skip
    input_views: tuple[str, ...] = ("curves",)
    verdict_note: str = ""
    advice: Mapping[str, str] = field(
        default_factory=lambda: {
            "weak_layer": "Try the other layer (`hidden` or `prediction`), another σ, a larger "
            "subset size n or more splits K.",
            "weak_output": "Try the `hidden` layer, another σ, a larger subset size n or more "
            "splits K.",
            "strongest_layer": "prediction",
            "refused_method": "no unlearning method of the registry applies to it yet",
        }
    )

    def detects(self, model: object) -> bool:
        """Whether ``model`` declares this family (``sde_family = "signal_regressor"``)."""
        return getattr(model, "sde_family", None) == self.name

    def detects_folder(self, folder: Path) -> bool:
        """Never: its checkpoint is a file."""
        return False


#: The 1-D signal regressor family.
SIGNAL_REGRESSOR = SignalRegressorFamily()
