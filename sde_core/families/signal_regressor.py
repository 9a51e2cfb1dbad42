"""The 1-D signal regressor family: a model mapping a signal ``(d,)`` to one real number.

The smallest family, and the template for a new one: everything the library asks about it is
declared here. It brings its architecture to the registry, ``signal_mlp`` (flatten, a hidden
layer ``hidden``, a linear ``head`` to one number), so a workspace model is ``arch =
"signal_mlp"`` and is known as this family's without loading it; a model built elsewhere
declares the family by its attribute ``sde_family = "signal_regressor"``. Its layers are
``prediction`` (the model's output, ``(N, 1)``, its default layer) and ``hidden``; it has no
classes (no softmax ``output``, no accuracy or membership attack), trains with the mean squared
error, no unlearning method of the registry applies to it yet, and its inputs are shown as
curves captioned with its prediction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sde_core.families.base import ArchitectureEntry, BehaviourMeasure

__all__ = ["SIGNAL_REGRESSOR", "SignalRegressorFamily", "build_signal_mlp"]

#: the family's layers: alias -> layer reference (the whole model's output, the hidden layer)
_LAYERS = {"prediction": "", "hidden": "hidden"}


def build_signal_mlp(input_dim: int = 16, width: int = 128) -> Any:
    """A fresh signal regressor: ``(N, input_dim)`` signals → ``(N, 1)`` predictions through one
    hidden ReLU layer of ``width`` units (the modules ``hidden`` and ``head``)."""
    from collections import OrderedDict

    from torch import nn  # torch only once a model is built

    hidden = nn.Sequential(nn.Linear(input_dim, width), nn.ReLU())
    layers = [("flat", nn.Flatten()), ("hidden", hidden), ("head", nn.Linear(width, 1))]
    return nn.Sequential(OrderedDict(layers))


@dataclass(frozen=True)
class SignalRegressorFamily:
    """The 1-D signal regressor family (see :class:`sde_core.families.base.Family`)."""

    name: str = "signal_regressor"
    label: str = "1-D signal regressor"
    arch: str | None = None
    architectures: tuple[ArchitectureEntry, ...] = (
        ArchitectureEntry(
            "signal_mlp", build_signal_mlp, {"input_dim": 16, "width": 128}, (16,), _LAYERS,
            "1-D signal regressor: a hidden layer of 128 ReLU units, one real output",
        ),
    )  # fmt: skip
    default_layer: str = "prediction"
    prediction_layer: str | None = "prediction"
    probes_at_noise_levels: bool = False
    has_class_outputs: bool = False
    output_aliases: Mapping[str, str] | None = field(default_factory=lambda: dict(_LAYERS))
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
            "refused_method": "no unlearning method of the registry applies to it yet",
            "output_size": "{n} output",
        }
    )

    def detects(self, model: object) -> bool:
        """Whether ``model`` is one of this family's: built from its architecture (it carries
        that ``sde_arch``) or declaring it (``sde_family = "signal_regressor"``)."""
        arch = getattr(model, "sde_arch", None)
        return any(a.name == arch for a in self.architectures) or (
            getattr(model, "sde_family", None) == self.name
        )

    def detects_folder(self, folder: Path) -> bool:
        """Never: its checkpoint is a file."""
        return False


#: The 1-D signal regressor family.
SIGNAL_REGRESSOR = SignalRegressorFamily()
