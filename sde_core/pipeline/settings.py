"""Evaluation settings: one schema and one validation for the library, the workspace's
``[defaults]``, the CLI flags and the dashboard widgets (see ``docs/method.md``).

This module imports nothing above the statistics layer, so the workspace and the evaluation
orchestration both build on it without importing each other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import numpy as np

from sde_core.common.validation import check_int, check_number
from sde_core.errors import SettingsError
from sde_core.stats.hsic import MAX_SPLITS

__all__ = ["ALGORITHM_VERSION", "NOISE_LEVELS", "EvalSettings"]

#: Version of the numerics behind stored results (split drawing, subset drawing, statistics).
#: Bump it whenever a change alters any stored number, so results stores never serve stale rows.
ALGORITHM_VERSION = 5
#: Device names a setting may hold (whether this machine has the device is checked where the
#: device is used, and by ``workspace validate``).
_DEVICE = re.compile(r"cpu|cuda(:[0-9]{1,3})?|mps")

#: Noise levels σ_t (in the units of the data: images in [−1, 1]) at which a denoiser's layers are
#: offered (``denoised@0.5``, ``block2@0.5``; method §14). The noise level of an evaluation is
#: part of its layer name, hence of ``EvalSettings.layer`` and of every cache and store key; any
#: positive level can be named (``--layer denoised@0.3``), these are the ones listed.
NOISE_LEVELS: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.0)
#: The precision design's settings (method §15): inert while ``precision`` is 0.
_PRECISION_FIELDS = ("precision", "pilot_draws", "max_draws")


@dataclass(frozen=True)
class EvalSettings:
    """Evaluation settings (method §2–5, §9, §12). Every default is visible and changeable.

    Attributes:
        layer: layer alias (``output``, ``logits``, ``penultimate``, ``block1``…) or module name;
            a denoiser's layer carries its noise level (``denoised@0.5``, :data:`NOISE_LEVELS`).
        sigma: ``"sqrt_dim"``, ``"median"`` or a positive float.
        subset_size: n, rows per subset (targets, references, panels).
        targets: T, number of target subsets drawn from D_f (and of controlled F1 subsets),
            shared out among the draws.
        splits: K, random splits per subset.
        panel_size: R, reference subsets per side for the calibrated evidence (per draw).
        seed: seed of every subset draw and split.
        draws: B, independent reference draws (method §12): each draw has its own S_IT, S_OOT,
            panels, splits and its share of the targets and controls; every headline number is
            a point value over the draws with an interval from the spread between them. An
            evaluation uses ``min(draws, targets // 2)`` draws (each needs a target and a control
            of each class) and says so; one draw reproduces the paper's single reference draw,
            whose interval cannot include the reference variance.
        bins: histogram bins of the JSD decision.
        alpha: level of the reference-validity U-tests (paper and panel).
        alpha_calibrated: level of the calibrated verdict.
        estimator: ``"biased"`` (paper) or ``"unbiased"`` HSIC.
        null_pairs: pairs of disjoint out-of-training subsets in the null check (shared out
            among the draws).
        baseline_targets: controlled subsets (half in, half out) scored by the MMD/W2 baselines;
            0 switches the baselines off (exact W2 is O(n³) per subset).
        pool: global-average-pool 4-D activations.
        device: ``"cpu"`` or a torch device for extraction and the HSIC engine.
        precision: W, the requested half-width of the headline intervals (method §15); 0 (the
            default) keeps the fixed design of ``draws`` draws. With W > 0 a pilot of
            ``pilot_draws`` draws fixes how many draws reach W (Stein's two-stage design), each
            draw judging ``targets // draws`` targets as in the fixed design.
        pilot_draws: n0, the pilot's draws (precision only).
        max_draws: the budget in draws (precision only): the run stops there and says so.
    """

    layer: str = "output"
    sigma: str | float = "sqrt_dim"
    subset_size: int = 1000
    targets: int = 100
    splits: int = 200
    panel_size: int = 20
    seed: int = 0
    bins: int = 30
    alpha: float = 0.01
    alpha_calibrated: float = 0.05
    estimator: str = "biased"
    null_pairs: int = 20
    baseline_targets: int = 20
    pool: bool = True
    device: str = "cpu"
    draws: int = 5
    precision: float = 0.0
    pilot_draws: int = 10
    max_draws: int = 60

    def __post_init__(self) -> None:
        def positive_int(name: str, minimum: int = 1, maximum: int | None = None) -> None:
            check_int(
                getattr(self, name), name, minimum=minimum, maximum=maximum, error=SettingsError
            )

        positive_int("subset_size", 4)
        positive_int("targets", 2, 10_000)
        positive_int("splits", 2, MAX_SPLITS)
        positive_int("panel_size", 3, 1000)
        positive_int("seed", 0)
        positive_int("bins", 2, 1000)
        positive_int("null_pairs", 1, 10_000)
        positive_int("baseline_targets", 0, 10_000)
        positive_int("draws", 1, 100)
        positive_int("pilot_draws", 2, 100)
        positive_int("max_draws", 2, 500)
        check_number(self.precision, "precision", ge=0.0, lt=0.5, error=SettingsError)
        if self.precision > 0 and self.max_draws < self.pilot_draws:
            raise SettingsError(
                f"max_draws={self.max_draws} is smaller than the pilot's pilot_draws="
                f"{self.pilot_draws}: raise max_draws or lower pilot_draws"
            )
        if not isinstance(self.layer, str) or not self.layer:
            raise SettingsError(f"layer must be a non-empty name; got {self.layer!r}")
        if isinstance(self.sigma, str):
            if self.sigma not in ("sqrt_dim", "median"):
                raise SettingsError(
                    f"sigma must be 'sqrt_dim', 'median' or a positive number; got {self.sigma!r}"
                )
        else:
            check_number(self.sigma, "sigma", gt=0.0, error=SettingsError)
        for name in ("alpha", "alpha_calibrated"):
            check_number(getattr(self, name), name, gt=0.0, lt=1.0, error=SettingsError)
        if 1.0 / (self.panel_size + 1) >= self.alpha_calibrated:
            need = int(np.ceil(1.0 / self.alpha_calibrated))
            raise SettingsError(
                f"with panel_size={self.panel_size} the smallest calibrated p-value is "
                f"1/{self.panel_size + 1} ≥ alpha_calibrated={self.alpha_calibrated}, so no "
                f"verdict is possible: use panel_size ≥ {need} or a larger alpha_calibrated"
            )
        if not isinstance(self.device, str) or not _DEVICE.fullmatch(self.device):
            raise SettingsError(
                f"device {str(self.device)[:40]!r} is not a compute device: use 'cpu', 'cuda', "
                "'cuda:N' or 'mps'"
            )
        if self.estimator not in ("biased", "unbiased"):
            raise SettingsError(f"estimator must be 'biased' or 'unbiased'; got {self.estimator!r}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> EvalSettings:
        """Build from a mapping (workspace ``[defaults]``, CLI flags), rejecting unknown keys."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise SettingsError(f"unknown settings {unknown}; valid settings: {sorted(known)}")
        return cls(**dict(values))

    def with_overrides(self, **overrides: Any) -> EvalSettings:
        """A copy with the given non-None fields replaced (CLI flags, dashboard widgets)."""
        given = {k: v for k, v in overrides.items() if v is not None}
        known = {f.name for f in fields(self)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise SettingsError(f"unknown settings {unknown}; valid settings: {sorted(known)}")
        return replace(self, **given)

    def result_key(self) -> dict[str, Any]:
        """The settings that determine results (the store's run key), with the algorithm version.

        Without a precision target its two budget fields change nothing and are left out, so a
        fixed-design run keeps the key it had before they existed."""
        key = {**asdict(self), "algorithm": ALGORITHM_VERSION}
        if not self.precision:
            for name in _PRECISION_FIELDS:
                key.pop(name)
        return key
