"""Evaluation settings: one table, one schema and one validation for the library, the
workspace's ``[defaults]``, the CLI flags, the dashboard widgets, deep links and plans (see
``docs/method.md``).

:data:`SETTINGS` declares every field of :class:`EvalSettings` once — its symbol, glossary
definition, method section, bounds, CLI flag, URL key and widget — and everything that reads or
shows a setting is built from it: :class:`EvalSettings` validates with its bounds, the CLI's
flags (:mod:`sde_core.cli._args`), the plans' parameter types (:mod:`sde_core.pipeline.plans`),
the glossary (:mod:`sde_core.viz.glossary`), the link codec (:mod:`sde_core.services.view_state`)
and the dashboard's sidebar (``pages/_common.py``). σ is written in the one syntax of
:mod:`sde_core.common.sigma`. Adding a setting is one :class:`Setting` entry here, its field
in :class:`EvalSettings` and its use in the computation.

This module imports nothing above the statistics layer, so the workspace and the evaluation
orchestration both build on it without importing each other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, fields, replace
from typing import Any, Literal

import numpy as np

from sde_core.common.sigma import SIGMA_SYNTAX, SQRT_DIM, parse_sigma
from sde_core.common.validation import check_int, check_number
from sde_core.errors import SettingsError
from sde_core.stats.hsic_pool import MAX_POOL_ROWS
from sde_core.stats.hsic_splits import MAX_SPLITS

__all__ = [
    "ALGORITHM_VERSION",
    "DEFAULT_NULL_SIZE",
    "DEFAULT_PRECISION",
    "MAX_SEED",
    "NOISE_LEVELS",
    "PRECISION_FIELDS",
    "PRECISION_RULE_VERSION",
    "SETTINGS",
    "EvalSettings",
    "Setting",
    "setting",
    "settings_from_key",
    "with_stated_design",
]

#: Version of the numerics behind stored results (split drawing, subset drawing, statistics).
#: Bump it whenever a change alters any stored number, so results stores never serve stale rows.
ALGORITHM_VERSION = 5
#: Version of how a precision run judges its half-widths against W (method §15), part of the
#: store key of precision runs only (a fixed-design run has no W). 2: the half-width of every
#: interval given — Stein's joined with Korn–Graubard's, and the Korn–Graubard interval of a rate
#: the gate withheld after the pilot but publishes at the end; 1 took the wider of the two
#: halves of the driving rates, which can be narrower than their join, and so said "reached" of
#: intervals wider than W. It changes no H, distance or classic metric, so the stage cache
#: (keyed by ALGORITHM_VERSION) still serves a precision run after a bump: only its summary is
#: recomputed.
PRECISION_RULE_VERSION = 2
#: Device names a setting may hold (whether this machine has the device is checked where the
#: device is used, and by ``workspace validate``).
_DEVICE = re.compile(r"auto|cpu|cuda(:[0-9]{1,3})?|mps")

#: Noise levels σ_t (in the units of the data: images in [−1, 1]) at which a denoiser's layers are
#: offered (``denoised@0.5``, ``block2@0.5``; method §14). The noise level of an evaluation is
#: part of its layer name, hence of ``EvalSettings.layer`` and of every cache and store key; any
#: positive level can be named (``--layer denoised@0.3``), these are the ones listed.
NOISE_LEVELS: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.0)
#: Largest seed: 2**32 − 1, the range of a 32-bit seed that every seeded library accepts
#: (NumPy's legacy ``RandomState``, scikit-learn's ``random_state``), so a seed means the same
#: on every route; far more seeds than anyone enumerates.
MAX_SEED = 2**32 - 1
#: Why every number setting has a maximum (a link's ``?n=1000000000`` was applied): n at most
#: ``MAX_POOL_ROWS`` (32,768) — the rows of the largest pool whose distances are precomputed
#: (8 GiB of float64), already two 16,384² Gram matrices per split, beyond any forget set of the
#: paper; T, K, B, bins, R, the null pairs and the baseline subsets as declared below (each at
#: least 10x what the paper or a shipped plan uses); W at most 0.5 (half the [0, 1] range of a
#: rate); α levels below 1.

#: The precision design's settings (method §15): inert while ``precision`` is 0.
PRECISION_FIELDS = ("precision", "pilot_draws", "max_draws", "null_size")
#: The null check's size in a precision design (method §9): it judges at least this many
#: unseen subsets, and this many training subsets, over all the draws the run uses. A draw's
#: subsets share its panel, whose position moves their calls together (ρ ≈ 0.045 on the shipped
#: demos, ``pipeline/meta_eval/null_sizing.py``), so the number of draws limits the power more
#: than the subsets do: at 1,000 the 95% interval excludes α_cal = 0.05 from a false-call rate
#: of 2α_cal = 10% with probability 0.92 at B = 20 draws and 0.65 at the pilot's B = 10 (no
#: size reaches 0.8 at B = 10; 300 gives 0.66 and 0.49); a test checks these. It costs twice
#: the unsized evaluation at B = 10, 1.16× at B = 36. 0 keeps the fixed design's pairs and
#: controls.
DEFAULT_NULL_SIZE = 1000
#: The precision target W of the default design (method §15): ±0.1 on OTR, calibrated OTR and
#: the over-unlearned share, the half-width at which a mixed reading (OTR 0.5–0.8) is told
#: apart from "not forgotten"; ``precision = 0`` (or B given alone) is the fixed design.
DEFAULT_PRECISION = 0.1

#: How a setting's value is written: ``int``, ``float`` (a finite real number),
#: ``sigma`` (:mod:`sde_core.common.sigma`), ``name`` (non-empty text: the layer), ``choice``
#: (one of ``choices``), ``bool``, ``device`` (``cpu``, ``cuda``, ``cuda:N``, ``mps``).
SettingKind = Literal["int", "float", "sigma", "name", "choice", "bool", "device"]
#: The dashboard's widget: ``number`` (a number input in the sidebar), ``choice`` (a select box
#: of ``choices``), ``toggle`` (a checkbox of a ``bool``), ``sigma`` (the σ rule radio and its
#: number), ``layer`` (each page's layer picker) or ``none`` (set in ``workspace.toml`` or on the
#: command line only). A ``number``, ``choice`` or ``toggle`` with a ``group`` is shown under
#: that heading in the sidebar's "More settings".
WidgetKind = Literal["number", "choice", "toggle", "sigma", "layer", "none"]


@dataclass(frozen=True)
class Setting:
    """One evaluation setting, declared once (:data:`SETTINGS`).

    Attributes:
        name: the :class:`EvalSettings` field (and the glossary key).
        symbol: the method's symbol (``n``, ``T``, ``K``, ``B``, ``R``, ``σ``) or, where it has
            none, its short name.
        label: the glossary's short label, shown in tables (default: the symbol).
        definition: one sentence for a non-expert (the glossary's and the CLI's help text).
        section: the defining section of ``docs/method.md`` (a number, or ``"choices"``).
        kind: how the value is written (:data:`SettingKind`).
        cli_flag: the command-line flag (``--subset-size``).
        url_key: the deep link's query parameter, or None when links do not carry the setting
            (it then comes from the workspace's ``[defaults]``). link_off: the value that
            switches the setting's feature off, which a link leaves out (so links made before
            the setting existed stay as they were); None: every value is written.
        widget: the dashboard widget (:data:`WidgetKind`). widget_label: its label.
        minimum, maximum: bounds of an ``int`` or ``float`` (None: open), inclusive unless
            ``exclusive``.
        choices: the values of a ``choice``.
        cli_words: for a ``bool`` given as words on the command line, word -> value.
        step: the number input's step (its type is the setting's). group: the heading it is
            shown under in the sidebar's "More settings" (empty: at the top of the sidebar).
    """

    name: str
    symbol: str
    definition: str
    section: int | str
    kind: SettingKind
    cli_flag: str
    url_key: str | None = None
    link_off: Any = None
    widget: WidgetKind = "none"
    widget_label: str = ""
    minimum: float | None = None
    maximum: float | None = None
    exclusive: bool = False
    choices: tuple[str, ...] = ()
    cli_words: tuple[tuple[str, bool], ...] = ()
    step: float = 1
    group: str = ""
    label: str = ""

    @property
    def short_label(self) -> str:
        """The label tables and the glossary show (``label``, else the symbol)."""
        return self.label or self.symbol

    @property
    def default(self) -> Any:
        """The library default (the :class:`EvalSettings` field's default)."""
        found = _FIELDS[self.name].default
        assert found is not MISSING, f"EvalSettings.{self.name} has no default"
        return found

    def check(self, value: Any) -> Any:
        """``value`` if it is a valid value of this setting, else raise; σ text comes back in
        its canonical form (:meth:`~sde_core.common.sigma.Sigma.setting`: ``" 0.50*sqrt_dim"``
        -> ``"0.5*sqrt_dim"``, ``"0.5"`` -> ``0.5``).

        Raises:
            SettingsError: the value, what the setting accepts and how to fix it.
        """
        name = self.name
        if self.kind == "int":
            shift = int(self.exclusive)
            least = None if self.minimum is None else int(self.minimum) + shift
            most = None if self.maximum is None else int(self.maximum) - shift
            return check_int(value, name, minimum=least, maximum=most, error=SettingsError)
        if self.kind == "float":
            lo, hi = self.minimum, self.maximum
            if self.exclusive:
                check_number(value, name, gt=lo, lt=hi, error=SettingsError)
            else:
                check_number(value, name, ge=lo, le=hi, error=SettingsError)
            return value
        if self.kind == "sigma":
            parsed = parse_sigma(value, name, error=SettingsError)
            return parsed.setting() if isinstance(value, str) else value
        if self.kind == "name":
            if not isinstance(value, str) or not value:
                raise SettingsError(f"{name} must be a non-empty name; got {value!r}")
            return value
        if self.kind == "choice":
            if value not in self.choices:
                shown = " or ".join(repr(c) for c in self.choices)
                raise SettingsError(f"{name} must be {shown}; got {value!r}")
            return value
        if self.kind == "bool":
            if not isinstance(value, (bool, np.bool_)):
                raise SettingsError(f"{name} must be true or false; got {value!r}")
            return bool(value)
        if not isinstance(value, str) or not _DEVICE.fullmatch(value):
            raise SettingsError(
                f"{name} {str(value)[:40]!r} is not a compute device: use 'auto', 'cpu', "
                "'cuda', 'cuda:N' or 'mps'"
            )
        return value

    def number_text(self, value: float) -> str:
        """A bound as text: whole digits for an ``int`` setting (``4294967295``), else ``:g``."""
        return str(int(value)) if self.kind == "int" else f"{value:g}"

    def bounds_text(self) -> str:
        """The accepted values in words: ``"2 to 10000"``, ``"≥ 0"``, ``"biased or unbiased"``."""
        if self.kind in ("int", "float"):
            strict = self.exclusive
            lo = None if self.minimum is None else self.number_text(self.minimum)
            hi = None if self.maximum is None else self.number_text(self.maximum)
            if lo is not None and hi is not None:
                return f"{lo} to {hi}" + (" (exclusive)" if strict else "")
            if lo is not None:
                return f"{'>' if strict else '≥'} {lo}"
            return "any" if hi is None else f"{'<' if strict else '≤'} {hi}"
        if self.kind == "choice":
            return " or ".join(self.choices)
        if self.kind == "bool":
            return " or ".join(w for w, _ in self.cli_words) if self.cli_words else "true or false"
        return {
            "sigma": SIGMA_SYNTAX,
            "name": "a layer alias or module name",
            "device": "cpu, cuda, cuda:N or mps",
        }[self.kind]


@dataclass(frozen=True)
class EvalSettings:
    """Evaluation settings (method §2–5, §9, §12). Every default is visible and changeable.

    Attributes:
        layer: layer alias (``output``, ``logits``, ``penultimate``, ``block1``…) or module name;
            a denoiser's layer carries its noise level (``denoised@0.5``, :data:`NOISE_LEVELS`).
        sigma: a σ rule or a positive float, in the one σ syntax of :mod:`sde_core.common.sigma`
            (text is kept in its canonical form).
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
        device: ``"cpu"`` or a torch device for extraction and the HSIC engine; ``"auto"``: a
            CUDA GPU when torch sees one (the HSIC stage then runs the torch kernel, results
            equivalent to the CPU engine's under method §13), else the CPU.
        precision: W, the requested half-width of the headline intervals (method §15): by
            default ±0.1 (:data:`DEFAULT_PRECISION`): a pilot of ``pilot_draws`` draws fixes how
            many draws reach W (Stein's two-stage design), each draw judging
            ``targets // draws`` targets as in the fixed design. 0 keeps the fixed design of
            ``draws`` draws; a mapping, command line or link that gives ``draws`` without
            ``precision`` asks for that fixed design (:func:`with_stated_design`).
        pilot_draws: n0, the pilot's draws (precision only).
        max_draws: the budget in draws (precision only): the run stops there and says so.
        null_size: N, the least number of unseen subsets and of training subsets the null
            check judges over the B draws of a precision design (precision only; method §9):
            each draw tops up its ``null_pairs / draws`` pairs and ``targets / (2·draws)``
            training controls to ``⌈N/(2B)⌉`` pairs and ``⌈N/B⌉`` training subsets with
            subsets of its own (the other subsets are unchanged). Default
            :data:`DEFAULT_NULL_SIZE`; 0 keeps the pairs and controls alone.
    """

    layer: str = "output"
    sigma: str | float = SQRT_DIM
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
    precision: float = DEFAULT_PRECISION
    pilot_draws: int = 10
    max_draws: int = 60
    null_size: int = DEFAULT_NULL_SIZE

    def __post_init__(self) -> None:
        for entry in SETTINGS:
            checked = entry.check(getattr(self, entry.name))
            if entry.kind == "sigma":  # σ text in its canonical form
                object.__setattr__(self, entry.name, checked)
        if self.precision > 0 and self.max_draws < self.pilot_draws:
            raise SettingsError(
                f"max_draws={self.max_draws} is smaller than the pilot's pilot_draws="
                f"{self.pilot_draws}: raise max_draws or lower pilot_draws"
            )
        if 1.0 / (self.panel_size + 1) >= self.alpha_calibrated:
            need = int(np.ceil(1.0 / self.alpha_calibrated))
            raise SettingsError(
                f"with panel_size={self.panel_size} the smallest calibrated p-value is "
                f"1/{self.panel_size + 1} ≥ alpha_calibrated={self.alpha_calibrated}, so no "
                f"verdict is possible: use panel_size ≥ {need} or a larger alpha_calibrated"
            )

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> EvalSettings:
        """Build from a mapping (workspace ``[defaults]``, a report's or plan's settings),
        rejecting unknown keys; ``draws`` without ``precision`` is the fixed design of that many
        draws (:func:`with_stated_design`)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise SettingsError(f"unknown settings {unknown}; valid settings: {sorted(known)}")
        return cls(**with_stated_design(values))

    def with_overrides(self, **overrides: Any) -> EvalSettings:
        """A copy with the given non-None fields replaced (CLI flags, dashboard widgets)."""
        given = {k: v for k, v in overrides.items() if v is not None}
        known = {f.name for f in fields(self)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise SettingsError(f"unknown settings {unknown}; valid settings: {sorted(known)}")
        return replace(self, **given)

    def result_key(self) -> dict[str, Any]:
        """The settings that determine results (the store's run key), with the algorithm version
        (and, for a precision run, :data:`PRECISION_RULE_VERSION`).

        Without a precision target its fields change nothing and are left out, so a
        fixed-design run keeps the key it had before they existed; ``null_size = 0`` is left
        out too, so a precision run of the null check's pairs and controls alone keeps the key
        it had before the null check was sized (:func:`settings_from_key` reads it back)."""
        key = {**asdict(self), "algorithm": ALGORITHM_VERSION}
        if not self.precision:
            for name in PRECISION_FIELDS:
                key.pop(name)
            return key
        key["precision_rule"] = PRECISION_RULE_VERSION
        if not self.null_size:
            key.pop("null_size")
        return key


_FIELDS = {f.name: f for f in fields(EvalSettings)}
#: The versions a stored run key carries beside the settings (:meth:`EvalSettings.result_key`).
_VERSION_FIELDS = frozenset({"algorithm", "precision_rule"})


def settings_from_key(key: Mapping[str, Any]) -> EvalSettings:
    """The :class:`EvalSettings` of a stored run key (:meth:`EvalSettings.result_key`, with or
    without its ``"algorithm"`` and ``"precision_rule"``): a field the key leaves out is at the
    value that left it out — ``precision = 0`` (the fixed design) and ``null_size = 0`` (the
    null check unsized).

    Raises:
        SettingsError: an unknown or invalid setting.
    """
    values = {k: v for k, v in key.items() if k not in _VERSION_FIELDS}
    values.setdefault("precision", 0.0)
    values.setdefault("null_size", 0)
    return EvalSettings.from_mapping(values)


def with_stated_design(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with ``precision = 0`` added when they give ``draws`` (B) but not
    ``precision`` (W): stating B alone asks for the fixed design of B draws.

    This keeps every workspace ``[defaults]``, report, plan and deep link written while the
    fixed design was the default (each states its B and no W) meaning what it meant when it was
    written, and makes ``--draws 8`` on the command line the fixed design of 8 draws; values
    that state neither get the default design (W = :data:`DEFAULT_PRECISION`)."""
    out = dict(values)
    if out.get("draws") is not None and out.get("precision") is None:
        out["precision"] = 0.0
    return out


#: Every evaluation setting, declared once (in the order the CLI's help and the sidebar show
#: them). A test checks that each field of :class:`EvalSettings` has exactly one entry with a
#: symbol, a CLI flag, bounds, a widget kind, a glossary entry and a method section.
SETTINGS: tuple[Setting, ...] = (
    Setting(
        "layer", "layer",
        "Which activations are compared: 'output' (softmax probabilities), 'logits', "
        "'penultimate' or a named module.",
        1, "name", "--layer", url_key="layer", widget="layer", widget_label="Layer",
    ),
    Setting(
        "sigma", "σ",
        "Bandwidth of the Gaussian kernel in activation units: √d by default, a multiple of "
        "√d, the median distance between activations, or a number.",
        2, "sigma", "--sigma", url_key="sigma", widget="sigma",
        widget_label="Kernel bandwidth σ",
    ),
    Setting(
        "subset_size", "n", "Rows per subset (targets, references, panels).",
        5, "int", "--subset-size", url_key="n", widget="number", widget_label="Subset size n",
        minimum=4, maximum=MAX_POOL_ROWS, step=50,
    ),
    Setting(
        "targets", "T", "Number of forget-set subsets drawn (the targets).",
        5, "int", "--targets", url_key="T", widget="number", widget_label="Target subsets T",
        minimum=2, maximum=10_000, step=10,
    ),
    Setting(
        "splits", "K", "Random half-splits per subset.",
        2, "int", "--splits", url_key="K", widget="number", widget_label="Splits per subset K",
        minimum=2, maximum=MAX_SPLITS, step=50,
    ),
    Setting(
        "seed", "seed", "Seed of every subset draw and split: the same seed, the same result.",
        2, "int", "--seed", url_key="seed", widget="number", widget_label="Seed", minimum=0,
        maximum=MAX_SEED,
    ),
    Setting(
        "draws", "B",
        "B independent reference draws: each has its own S_IT, S_OOT, panels, share of the "
        "targets and controls; the spread between draws gives every interval. Given without "
        "a precision target W, B draws are run (the fixed design).",
        12, "int", "--draws", url_key="B", widget="number", widget_label="Reference draws B",
        minimum=1, maximum=100, label="draws",
    ),
    Setting(
        "precision", "W",
        "Half-width to reach for OTR, calibrated OTR and the over-unlearned share (default "
        "0.1): a pilot of draws fixes how many draws that takes (Stein's two stages); 0 keeps "
        "the fixed B draws.",
        15, "float", "--precision", url_key="W", link_off=0.0, widget="number",
        widget_label="Precision target ±W (0 = fixed B)", minimum=0.0, maximum=0.5, step=0.01,
        label="precision target ±W",
    ),
    Setting(
        "pilot_draws", "n0", "Pilot draws of a precision target: their spread fixes B.",
        15, "int", "--pilot-draws", url_key="n0", widget="number",
        widget_label="Pilot draws n0 (precision target only)", minimum=2, maximum=100,
        label="pilot draws", group="Precision design",
    ),
    Setting(
        "max_draws", "B_max", "Budget in draws of a precision target: the run stops there.",
        15, "int", "--max-draws", url_key="Bmax", widget="number",
        widget_label="Draw budget B_max (precision target only)", minimum=2, maximum=500,
        label="draw budget", group="Precision design",
    ),
    Setting(
        "null_size", "N_null",
        "Unseen subsets, and training subsets, the null check judges at least over a precision "
        "target's draws (default 1000: its 95% interval then tells a false-call rate of 2α "
        "from α with 92% power at 20 draws, 65% at 10); 0 keeps the null-check pairs and "
        "controls alone.",
        9, "int", "--null-size", url_key="Nnull", widget="number",
        widget_label="Null-check size N (precision target only)", minimum=0, maximum=100_000,
        step=50, label="null-check size", group="Precision design",
    ),
    Setting(
        "bins", "bins", "Histogram bins of the Jensen–Shannon decision.",
        4, "int", "--bins", url_key="bins", widget="number",
        widget_label="Histogram bins (JSD)", minimum=2, maximum=1000, group="Decision",
    ),
    Setting(
        "panel_size", "R", "Reference subsets per side of the calibrated test.",
        9, "int", "--panel-size", url_key="R", widget="number",
        widget_label="Reference panel size R", minimum=3, maximum=1000,
        group="Calibrated test",
    ),
    Setting(
        "null_pairs", "null pairs", "Pairs of unseen subsets in the null check.",
        9, "int", "--null-pairs", url_key="nulls", widget="number",
        widget_label="Null-check pairs", minimum=1, maximum=10_000, group="Calibrated test",
    ),
    Setting(
        "baseline_targets", "baseline subsets",
        "Controlled subsets scored by the MMD/W2 baselines (0 = off).",
        6, "int", "--baseline-targets", url_key="baselines", widget="number",
        widget_label="Baseline subsets (MMD/W2; 0 = off)", minimum=0, maximum=10_000, step=10,
        group="Baselines",
    ),
    Setting(
        "alpha", "α", "Significance level of the reference checks (paper's and panel).",
        3, "float", "--alpha", url_key="alpha", widget="number",
        widget_label="Level α of the reference checks", minimum=0.0, maximum=1.0,
        exclusive=True, step=0.005, group="Decision",
    ),
    Setting(
        "alpha_calibrated", "α_cal", "Level of the calibrated verdicts.",
        9, "float", "--alpha-calibrated", url_key="acal", widget="number",
        widget_label="Level α_cal of the calibrated verdicts", minimum=0.0, maximum=1.0,
        exclusive=True, step=0.01, label="α (calibrated)", group="Calibrated test",
    ),
    Setting(
        "estimator", "estimator", "Biased (the paper's) or unbiased HSIC estimator.",
        2, "choice", "--estimator", url_key="estimator", widget="choice",
        widget_label="HSIC estimator", choices=("biased", "unbiased"),
        group="Estimator and pooling",
    ),
    Setting(
        "pool", "pool",
        "Global-average-pool convolutional feature maps; for language models, a text's hidden "
        "state is the mean over its real tokens (true) or its last real token's (false).",
        1, "bool", "--token-pooling", url_key="pool", widget="toggle",
        widget_label="Pool (average a feature map; a text's mean over its tokens)",
        cli_words=(("mean", True), ("last", False)), group="Estimator and pooling",
    ),
    Setting(
        "device", "device",
        "Where activations and HSIC are computed: cpu, a GPU (cuda, cuda:N, mps) or auto (a CUDA "
        "GPU when one is available, else the CPU).",
        2, "device", "--device",
    ),
)  # fmt: skip
_BY_NAME = {entry.name: entry for entry in SETTINGS}


def setting(name: str) -> Setting:
    """The :class:`Setting` of ``name``.

    Raises:
        SettingsError: no such setting (the message lists them).
    """
    if name not in _BY_NAME:
        raise SettingsError(f"unknown setting {name!r}; settings: {', '.join(_BY_NAME)}")
    return _BY_NAME[name]
