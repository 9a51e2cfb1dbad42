"""Decisions and headline metrics of SDE (method §3–5), calibrated evidence (method §9, §12).

Two families of evidence live here, shown side by side by the dashboard and the CLI:

* **The paper's procedure** — :func:`reference_check` (one-sided Mann-Whitney U over the K
  split values of one S_IT vs one S_OOT), :func:`decide` (Jensen–Shannon divergence between
  histograms of H), :func:`out_of_training_rate`, :func:`controlled_f1` and
  :func:`dependence_score`.
* **Calibrated subset-level evidence** — a panel of R reference subsets per side, one score
  ``s(S) = mean H(S)`` per subset: :func:`reference_panel_check`, :func:`calibrated_verdict`
  (rank p-values ``p_in``/``p_out``/``p_over`` and four verdicts), :func:`null_check` (false
  positive rates of both tests on disjoint out-of-training subsets outside the panel — a check
  that can fail), :func:`over_unlearning_test` (model level) and the spread control
  (:func:`sde_core.stats.hsic.kernel_spread`).

The split-level U-test treats the K splits of one subset as independent samples, which they are
not; :func:`null_check` measures how often it fires on two disjoint subsets of the *same* pool.
Intervals over an evaluation's independent draws live in :mod:`sde_core.stats.replication`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

from sde_core.common.validation import (
    as_float_array,
    as_float_matrix,
    as_float_vector,
    check_int,
    check_number,
)
from sde_core.errors import InputError
from sde_core.stats.hsic import Estimator, split_half_hsic_batch

__all__ = [
    "FORGOTTEN_VERDICTS",
    "OUTLIER_Z",
    "VERDICTS",
    "CalibratedVerdict",
    "Decision",
    "F1Result",
    "NullCalibration",
    "OverUnlearningTest",
    "PanelOutlier",
    "RateEstimate",
    "ReferenceCheck",
    "Verdict",
    "calibrated_otr",
    "calibrated_verdict",
    "controlled_f1",
    "decide",
    "dependence_score",
    "histogram_edges",
    "jsd",
    "null_calibration",
    "null_check",
    "out_of_training_rate",
    "over_unlearning_test",
    "panel_outliers",
    "pool_null_checks",
    "reference_check",
    "reference_panel_check",
    "subset_scores",
    "wilson_interval",
]

Verdict = Literal["in-training", "out-of-training", "over-unlearned", "inconclusive"]
#: The four calibrated verdicts (method §12), in display order.
VERDICTS: tuple[str, ...] = ("in-training", "out-of-training", "over-unlearned", "inconclusive")
#: Verdicts that count towards the calibrated OTR (method §9): only "out-of-training". An
#: over-unlearned target (flatter, lower-spread outputs than unseen data) is *not* evidence of
#: forgetting — a model can fit D_f better than unseen data and still be over-unlearned — so it
#: is reported as its own rate, never counted as forgotten.
FORGOTTEN_VERDICTS: tuple[str, ...] = ("out-of-training",)
#: Robust z beyond which a panel member is an outlier (:func:`panel_outliers`): for normal
#: scores and R = 20 a member this far from the other 19 (median, 1.4826·MAD) arises in about
#: 0.1% of panels per side (simulated, 200,000 panels).
OUTLIER_Z = 8.0


# --------------------------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------------------------


#: Most histogram bins accepted (as many as the most splits a subset may have).
MAX_BINS = 100_000


def _sample(x: object, name: str, min_size: int = 1) -> np.ndarray:
    """A finite real 1-D float64 sample (e.g. an H vector)."""
    return as_float_vector(x, name, min_size=min_size)


def _alpha(alpha: float, name: str = "alpha") -> float:
    return check_number(alpha, name, gt=0.0, lt=1.0)


def _bins(bins: int) -> int:
    return check_int(bins, "bins", minimum=2, maximum=MAX_BINS)


def _seed(seed: int) -> int:
    return check_int(seed, "seed", minimum=0)


def _check_span(lo: float, hi: float, edges: np.ndarray | None = None) -> None:
    """Refuse samples whose range float64 cannot cut into the requested bins."""
    if not np.isfinite(hi - lo):
        raise InputError(
            f"the values span [{lo:.3g}, {hi:.3g}], wider than float64 can represent: "
            "rescale them (H values are kernel units, normally in [0, 1])"
        )
    if edges is not None and np.any(np.diff(edges) <= 0):
        raise InputError(
            f"the values span only {hi - lo:.3g} around {lo:.6g}, too narrow to cut into "
            f"{edges.size - 1} float64 bins: use fewer bins"
        )


# --------------------------------------------------------------------------------------------
# The paper's decision rule (method §3–4)
# --------------------------------------------------------------------------------------------


def histogram_edges(*samples: object, bins: int = 30) -> np.ndarray:
    """Common histogram edges spanning the min..max of all samples (``bins + 1`` edges).

    A zero range (all values equal) gets a unit-width bin around the value.

    Examples:
        >>> print(histogram_edges([0.0, 1.0], [2.0], bins=4))
        [0.  0.5 1.  1.5 2. ]
    """
    nb = _bins(bins)
    if not samples:
        raise InputError("histogram_edges needs at least one sample")
    arrays = [_sample(s, f"sample {i}") for i, s in enumerate(samples)]
    lo = min(float(a.min()) for a in arrays)
    hi = max(float(a.max()) for a in arrays)
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    _check_span(lo, hi)
    edges = np.linspace(lo, hi, nb + 1)
    _check_span(lo, hi, edges)
    return edges


def _probabilities(x: np.ndarray, edges: np.ndarray) -> np.ndarray:
    counts, _ = np.histogram(x, bins=edges)
    return counts / counts.sum()


def _jsd_probs(p: np.ndarray, q: np.ndarray) -> float:
    mix = 0.5 * (p + q)
    with np.errstate(divide="ignore", invalid="ignore"):
        kl_p = np.where(p > 0, p * np.log2(p / mix), 0.0).sum()
        kl_q = np.where(q > 0, q * np.log2(q / mix), 0.0).sum()
    # Clip tiny negative rounding; JSD base 2 lies in [0, 1].
    return float(min(max(0.5 * (kl_p + kl_q), 0.0), 1.0))


def jsd(a: object, b: object, bins: int | Sequence[float] | np.ndarray = 30) -> float:
    """Jensen–Shannon divergence (base 2, in [0, 1]) between the histograms of two samples.

    Args:
        a, b: 1-D samples (e.g. two H vectors).
        bins: the number of common bins spanning min..max of both samples, or explicit edges.

    Returns:
        JSD in bits: 0 for identical histograms, 1 for disjoint support.

    Examples:
        >>> jsd([0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0], bins=2)  # same histogram
        0.0
        >>> jsd([0.0, 0.1], [0.9, 1.0], bins=2)  # disjoint histograms
        1.0
    """
    xa, xb = _sample(a, "a"), _sample(b, "b")
    if isinstance(bins, (int, np.integer)) and not isinstance(bins, bool):
        edges = histogram_edges(xa, xb, bins=int(bins))
    else:
        edges = _sample(bins, "bin edges", min_size=2)
        if np.any(np.diff(edges) <= 0):
            raise InputError("bin edges must be strictly increasing")
        if xa.min() < edges[0] or xb.min() < edges[0] or max(xa.max(), xb.max()) > edges[-1]:
            raise InputError("bin edges must span every value of both samples")
    return _jsd_probs(_probabilities(xa, edges), _probabilities(xb, edges))


@dataclass(frozen=True)
class Decision:
    """The paper's decision for one target subset (method §4).

    Attributes:
        in_training: True iff ``d_it <= d_oot`` (ties count as in-training).
        d_it: JSD (bits) between the target's H histogram and S_IT's.
        d_oot: JSD (bits) between the target's H histogram and S_OOT's.
    """

    in_training: bool
    d_it: float
    d_oot: float

    @property
    def label(self) -> str:
        """``"in-training"`` or ``"out-of-training"``."""
        return "in-training" if self.in_training else "out-of-training"


def decide(target_h: object, it_h: object, oot_h: object, bins: int = 30) -> Decision:
    """Classify a target subset as in- or out-of-training by JSD to the references (method §4).

    Histograms use common bins spanning the min..max of the three samples. A target is
    in-training iff ``D(S, S_IT) < D(S, S_OOT)``; a tie is in-training too, so the evaluation
    never certifies forgetting on a tie.

    Args:
        target_h, it_h, oot_h: ``(K,)`` split-half HSIC vectors of the target and references.
        bins: number of histogram bins (default 30).

    Examples:
        >>> it, oot = [0.9, 1.0, 1.1, 1.0], [0.1, 0.2, 0.15, 0.2]
        >>> decide([0.95, 1.05, 1.0, 0.98], it, oot, bins=5)
        Decision(in_training=True, d_it=0.0, d_oot=1.0)
    """
    t = _sample(target_h, "target_h")
    it = _sample(it_h, "it_h")
    oot = _sample(oot_h, "oot_h")
    edges = histogram_edges(t, it, oot, bins=bins)
    pt = _probabilities(t, edges)
    d_it = _jsd_probs(pt, _probabilities(it, edges))
    d_oot = _jsd_probs(pt, _probabilities(oot, edges))
    return Decision(in_training=bool(d_it <= d_oot), d_it=d_it, d_oot=d_oot)


@dataclass(frozen=True)
class ReferenceCheck:
    """Validity of the references (method §3 or the subset-level panel of §9).

    Attributes:
        p_value: one-sided Mann-Whitney U p-value of ``IT > OOT``.
        valid: ``p_value < alpha``.
        statistic: the U statistic of the IT sample.
        alpha: the significance level used.
        effect: common-language effect size ``U / (n_it · n_oot)`` = P(IT > OOT).
    """

    p_value: float
    valid: bool
    statistic: float
    alpha: float
    effect: float


def _mwu_greater(it: np.ndarray, oot: np.ndarray, alpha: float) -> ReferenceCheck:
    res = stats.mannwhitneyu(it, oot, alternative="greater")
    p = float(res.pvalue)
    return ReferenceCheck(
        p_value=p,
        valid=bool(p < alpha),
        statistic=float(res.statistic),
        alpha=alpha,
        effect=float(res.statistic) / (it.size * oot.size),
    )


def reference_check(it_h: object, oot_h: object, alpha: float = 0.01) -> ReferenceCheck:
    """The paper's reference-validity test: one-sided Mann-Whitney U of H(S_IT) > H(S_OOT).

    Args:
        it_h, oot_h: ``(K,)`` split-half HSIC vectors of S_IT and S_OOT.
        alpha: significance level (default 0.01). With ``valid == False`` every decision of
            the evaluation must be reported as inconclusive.
    """
    return _mwu_greater(
        _sample(it_h, "it_h", min_size=2), _sample(oot_h, "oot_h", min_size=2), _alpha(alpha)
    )


# --------------------------------------------------------------------------------------------
# Headline metrics (method §5)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RateEstimate:
    """A proportion ``k / n`` with its Wilson score interval.

    Attributes:
        rate: k / n (NaN when n = 0). lo, hi: interval bounds. k, n: counts.
        confidence: the interval's nominal coverage.
    """

    rate: float
    lo: float
    hi: float
    k: int
    n: int
    confidence: float = 0.95


_MAX_TRIALS = 2**53


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (k successes out of n).

    Examples:
        >>> tuple(round(v, 4) for v in wilson_interval(8, 10))
        (0.4902, 0.9433)
        >>> wilson_interval(0, 0)  # no trials: the whole unit interval
        (0.0, 1.0)
    """
    # at most 2**53 trials: every count is then exact in float64 (larger ones overflow)
    n = check_int(n, "n", minimum=0, maximum=_MAX_TRIALS)
    k = check_int(k, "k", minimum=0, maximum=_MAX_TRIALS)
    if k > n:
        raise InputError(f"need 0 ≤ k ≤ n for a proportion; got k={k}, n={n}")
    confidence = _alpha(confidence, "confidence")
    if n == 0:
        return (0.0, 1.0)
    z = float(stats.norm.ppf(0.5 + confidence / 2.0))
    p = k / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (float(max(0.0, centre - half)), float(min(1.0, centre + half)))


def _rate(flags: np.ndarray, confidence: float) -> RateEstimate:
    k, n = int(flags.sum()), int(flags.size)
    lo, hi = wilson_interval(k, n, confidence)
    return RateEstimate(
        rate=k / n if n else float("nan"), lo=lo, hi=hi, k=k, n=n, confidence=confidence
    )


def _bool_flags(values: object, name: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1 or arr.size == 0:
        raise InputError(f"{name} must be a non-empty 1-D sequence; got shape {arr.shape}")
    if arr.dtype != bool and not np.isin(arr, (0, 1)).all():
        raise InputError(f"{name} must hold booleans (or 0/1)")
    return arr.astype(bool)


def out_of_training_rate(
    in_training: Sequence[bool] | np.ndarray, confidence: float = 0.95
) -> RateEstimate:
    """OTR (method §5): share of target subsets decided out-of-training, with a Wilson interval.

    Args:
        in_training: one boolean per target (the ``Decision.in_training`` flags).
    """
    flags = _bool_flags(in_training, "in_training")
    return _rate(~flags, confidence)


@dataclass(frozen=True)
class F1Result:
    """Controlled F1 with in-training as the positive class (method §5)."""

    f1: float
    precision: float
    recall: float
    tp: int
    fp: int
    fn: int
    tn: int


def controlled_f1(
    y_true: Sequence[bool] | np.ndarray, y_pred: Sequence[bool] | np.ndarray
) -> F1Result:
    """F1 of in-training decisions on controlled targets (label 1 = truly in-training).

    Undefined ratios (no positive predictions or labels) are reported as 0.
    """
    t = _bool_flags(y_true, "y_true")
    p = _bool_flags(y_pred, "y_pred")
    if t.size != p.size:
        raise InputError(f"y_true and y_pred differ in length ({t.size} vs {p.size})")
    tp = int(np.sum(t & p))
    fp = int(np.sum(~t & p))
    fn = int(np.sum(t & ~p))
    tn = int(np.sum(~t & ~p))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    return F1Result(f1=f1, precision=precision, recall=recall, tp=tp, fp=fp, fn=fn, tn=tn)


def dependence_score(target_h: object, it_h: object, oot_h: object) -> float:
    """Graded dependence (method §5): 0 ≈ out-of-training level, 1 ≈ in-training level.

    ``(median(target H) − median H(S_OOT)) / (median H(S_IT) − median H(S_OOT))`` where the
    target median pools every split of every target (``target_h`` may be ``(T, K)``).
    Returns NaN when the reference medians coincide (the scale is undefined).

    Examples:
        >>> round(dependence_score([0.5, 0.6], [1.0, 1.0], [0.0, 0.2]), 6)  # halfway between
        0.5
    """
    t = _sample(as_float_array(target_h, "target_h").ravel(), "target_h")
    med_it = float(np.median(_sample(it_h, "it_h")))
    med_oot = float(np.median(_sample(oot_h, "oot_h")))
    span = med_it - med_oot
    if span == 0.0:
        return float("nan")
    return (float(np.median(t)) - med_oot) / span


# --------------------------------------------------------------------------------------------
# Calibrated subset-level evidence (method §9, §12)
# --------------------------------------------------------------------------------------------


def subset_scores(h: object) -> np.ndarray:
    """Subset scores ``s(S) = mean of H(S)`` over the splits.

    Args:
        h: ``(T, K)`` split-half HSIC values (one row per subset) or a ``(K,)`` vector.

    Returns:
        ``(T,)`` float64 array (``(1,)`` for a single vector).

    Examples:
        >>> print(subset_scores([[1.0, 2.0, 3.0], [0.0, 0.0, 1.0]]).round(4))
        [2.     0.3333]
    """
    arr = as_float_array(h, "h")
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] == 0 or arr.shape[0] == 0:
        raise InputError(f"h must be (T, K) split values; got shape {arr.shape}")
    return arr.mean(axis=1)


def reference_panel_check(
    it_scores: object, oot_scores: object, alpha: float = 0.01
) -> ReferenceCheck:
    """Subset-level reference validity: one-sided Mann-Whitney U on panel scores (method §9).

    Each panel subset contributes one score, so the test's samples are far less dependent than
    the split values of the split-level :func:`reference_check`.
    """
    return _mwu_greater(
        _sample(it_scores, "it_scores", min_size=2),
        _sample(oot_scores, "oot_scores", min_size=2),
        _alpha(alpha),
    )


def _rank_p_values(score: float, it: np.ndarray, oot: np.ndarray) -> tuple[float, float, float]:
    """``(p_in, p_out, p_over)`` of one score against the two panels (method §9, §12)."""
    p_in = (1 + int(np.sum(oot >= score))) / (oot.size + 1)
    p_out = (1 + int(np.sum(it <= score))) / (it.size + 1)
    p_over = (1 + int(np.sum(oot <= score))) / (oot.size + 1)
    return p_in, p_out, p_over


@dataclass(frozen=True)
class CalibratedVerdict:
    """Calibrated verdict for one target (method §9, §12).

    Attributes:
        p_in: ``(1 + #{OOT_r ≥ s_t}) / (R_oot + 1)`` — small: more dependent than unseen data.
        p_out: ``(1 + #{IT_r ≤ s_t}) / (R_it + 1)`` — small: less dependent than training data.
        p_over: ``(1 + #{OOT_r ≤ s_t}) / (R_oot + 1)`` — small: *less* dependent than unseen
            data: the model's outputs on the target are flatter, lower-spread, than on data it
            never saw — not evidence that it forgot (method §9).
        verdict: ``"in-training"`` if p_in < α; else ``"over-unlearned"`` if p_over < α; else
            ``"out-of-training"`` if p_out < α; else ``"inconclusive"``. (p_in and p_over are
            never both below α < 0.5: their sum is at least (R_oot + 2)/(R_oot + 1). When p_in
            and p_out are both small the verdict is in-training: the evaluation never certifies
            forgetting on ambiguous evidence.)
        score: the target's subset score s_t.
    """

    p_in: float
    p_out: float
    verdict: Verdict
    score: float
    p_over: float = float("nan")


def calibrated_verdict(
    target_score: float, it_scores: object, oot_scores: object, alpha: float = 0.05
) -> CalibratedVerdict:
    """Rank-based, finite-sample valid verdict of a target against the reference panels.

    Under exchangeability of the target with the OOT panel (the target was never trained on),
    ``P(p_in ≤ α) ≤ α`` and ``P(p_over ≤ α) ≤ α``; likewise for p_out with the IT panel.

    Args:
        target_score: s_t = mean split-half HSIC of the target.
        it_scores: ``(R_it,)`` scores of in-training reference subsets.
        oot_scores: ``(R_oot,)`` scores of out-of-training reference subsets.
        alpha: level of the one-sided tests (default 0.05).
    """
    s = _sample([target_score], "target_score")[0]
    it = _sample(it_scores, "it_scores")
    oot = _sample(oot_scores, "oot_scores")
    a = _alpha(alpha)
    p_in, p_out, p_over = _rank_p_values(float(s), it, oot)
    verdict: Verdict
    if p_in < a:
        verdict = "in-training"
    elif p_over < a:
        verdict = "over-unlearned"
    elif p_out < a:
        verdict = "out-of-training"
    else:
        verdict = "inconclusive"
    return CalibratedVerdict(p_in=p_in, p_out=p_out, verdict=verdict, score=float(s), p_over=p_over)


def calibrated_otr(verdicts: Sequence[str], confidence: float = 0.95) -> RateEstimate:
    """Calibrated OTR: share of targets whose calibrated verdict is ``"out-of-training"``
    (method §9; over-unlearned targets are not counted as forgotten), with a Wilson interval
    (one draw; :mod:`sde_core.stats.replication` combines draws)."""
    if isinstance(verdicts, (str, bytes)) or not isinstance(verdicts, (Sequence, np.ndarray)):
        kind = type(verdicts).__name__
        raise InputError(f"verdicts must be a list of verdict strings; got {kind}")
    items = list(verdicts)
    wrong = [x for x in items if not isinstance(x, str)]
    if wrong:
        raise InputError(
            f"verdicts must be verdict strings ({', '.join(VERDICTS)}); got "
            f"{type(wrong[0]).__name__} {str(wrong[0])[:40]!r}"
        )
    v = np.asarray(items, dtype=object)
    if v.size == 0:
        raise InputError("calibrated_otr needs at least one verdict")
    unknown = set(v.tolist()) - set(VERDICTS)
    if unknown:
        raise InputError(f"unknown verdicts {sorted(unknown)}; known: {list(VERDICTS)}")
    return _rate(np.isin(v, FORGOTTEN_VERDICTS), confidence)


@dataclass(frozen=True)
class PanelOutlier:
    """A reference-panel member far enough from the rest to make a verdict unreachable.

    Attributes:
        side: ``"it"`` or ``"oot"`` (which panel). member: its position in the panel.
        score: its score. z: its robust z against the other members (median, 1.4826·MAD).
        blocks: the verdict it makes unreachable — ``"in-training"`` (a high OOT member: no
            target can rank above every OOT member), ``"over-unlearned"`` (a low OOT member)
            or ``"out-of-training"`` (a low IT member).
    """

    side: str
    member: int
    score: float
    z: float
    blocks: str


def _robust_z(scores: np.ndarray) -> np.ndarray:
    """Each member's leave-one-out robust z: ``(s_r − median(s_−r)) / (1.4826·MAD(s_−r))``
    (±inf where the other members are all equal and s_r differs; 0 where it equals them)."""
    z = np.empty(scores.size)
    for r in range(scores.size):
        rest = np.delete(scores, r)
        med = float(np.median(rest))
        mad = 1.4826 * float(np.median(np.abs(rest - med)))
        diff = float(scores[r]) - med
        z[r] = diff / mad if mad > 0 else (0.0 if diff == 0 else np.copysign(np.inf, diff))
    return z


def panel_outliers(
    it_scores: object, oot_scores: object, z_limit: float = OUTLIER_Z
) -> tuple[PanelOutlier, ...]:
    """Panel members that make a calibrated verdict unreachable (method §9's null check).

    A rank p-value can fall below α = 0.05 with R = 20 only when the tested score lies beyond
    *every* member on that side, so one member far out on the blocking side makes the verdict
    impossible for any target: a high OOT member blocks "in-training", a low OOT member blocks
    "over-unlearned", a low IT member blocks "out-of-training". (A high IT member blocks
    nothing.) A member is an outlier when its leave-one-out robust z exceeds ``z_limit``.

    Args:
        it_scores, oot_scores: ``(R,)`` panel scores (R ≥ 3).
        z_limit: robust-z threshold (default :data:`OUTLIER_Z`).

    Returns:
        The outliers found (empty when none), OOT before IT.

    Examples:
        >>> oot = [0.0, 0.1, -0.1, 0.05, -0.05, 0.02, 50.0]
        >>> [o.blocks for o in panel_outliers([1.0, 1.1, 0.9, 1.05, 0.95], oot)]
        ['in-training']
    """
    it = _sample(it_scores, "it_scores", min_size=3)
    oot = _sample(oot_scores, "oot_scores", min_size=3)
    limit = check_number(z_limit, "z_limit", gt=0.0)
    out: list[PanelOutlier] = []
    z_oot, z_it = _robust_z(oot), _robust_z(it)
    for r in np.flatnonzero(z_oot > limit):
        out.append(PanelOutlier("oot", int(r), float(oot[r]), float(z_oot[r]), "in-training"))
    for r in np.flatnonzero(z_oot < -limit):
        out.append(PanelOutlier("oot", int(r), float(oot[r]), float(z_oot[r]), "over-unlearned"))
    for r in np.flatnonzero(z_it < -limit):
        out.append(PanelOutlier("it", int(r), float(it[r]), float(z_it[r]), "out-of-training"))
    return tuple(out)


@dataclass(frozen=True)
class NullCalibration:
    """False-positive rates on genuinely disjoint out-of-training subsets (method §12).

    The null subsets come in pairs (A, B) of disjoint subsets of out-of-training data that are
    not in the reference panel and share no rows with it, so each is exchangeable with the
    panel only if the panel really represents unseen data.

    Attributes:
        split_test_fpr: share of pairs where the paper's split-level U-test says
            ``H(A) > H(B)`` at ``alpha_split`` — ideally ≈ alpha_split.
        calibrated_fpr: share of null subsets whose calibrated ``p_in`` against the OOT panel
            is below ``alpha_calibrated`` (a false "in-training") — ideally ≤ alpha_calibrated.
        over_unlearned_fpr: share of null subsets with ``p_over`` below ``alpha_calibrated`` (a
            false "over-unlearned") — ideally ≤ alpha_calibrated.
        n_pairs: number of pairs. alpha_split, alpha_calibrated: levels used.
        split_p_values: ``(n_pairs,)`` U-test p-values.
        calibrated_p_in, calibrated_p_over: ``(2·n_pairs,)`` rank p-values of A then B of each
            pair.
    """

    split_test_fpr: float
    calibrated_fpr: float
    over_unlearned_fpr: float
    n_pairs: int
    alpha_split: float
    alpha_calibrated: float
    split_p_values: np.ndarray
    calibrated_p_in: np.ndarray
    calibrated_p_over: np.ndarray


def null_check(
    pair_h: object,
    oot_panel_scores: object,
    alpha_split: float = 0.01,
    alpha_calibrated: float = 0.05,
) -> NullCalibration:
    """Both tests' false-positive rates on pairs of disjoint out-of-training subsets.

    Args:
        pair_h: ``(P, 2, K)`` split-half HSIC of P pairs (A, B) of disjoint subsets of
            out-of-training data that are not panel members and share no rows with them.
        oot_panel_scores: ``(R,)`` scores of the out-of-training reference panel the null
            subsets are judged against (R ≥ 1/alpha_calibrated − 1, or no rank p-value could
            fall below alpha_calibrated and the check could not fail).
        alpha_split: level of the paper's split-level U-test of H(A) > H(B) (default 0.01).
        alpha_calibrated: level of the calibrated verdict (default 0.05).

    Returns:
        A :class:`NullCalibration`. The check *can fail*: when the panel is not exchangeable
        with fresh unseen subsets (e.g. it comes from a different part of the data), the
        calibrated rate climbs far above ``alpha_calibrated``.
    """
    h = as_float_array(pair_h, "pair_h")
    if h.ndim != 3 or h.shape[0] < 1 or h.shape[1] != 2 or h.shape[2] < 2:
        raise InputError(
            f"pair_h must be (P, 2, K) with P ≥ 1 pairs and K ≥ 2 splits; got shape {h.shape}"
        )
    if not np.all(np.isfinite(h)):
        raise InputError("pair_h contains NaN/inf values: recompute it from finite activations")
    panel = _sample(oot_panel_scores, "oot_panel_scores", min_size=2)
    a_split = _alpha(alpha_split, "alpha_split")
    a_cal = _alpha(alpha_calibrated, "alpha_calibrated")
    if 1.0 / (panel.size + 1) >= a_cal:
        raise InputError(
            f"with a panel of {panel.size} subsets the smallest rank p-value is "
            f"1/{panel.size + 1} ≥ alpha_calibrated={a_cal}, so the calibrated check could "
            f"never fail: use a panel of at least {int(np.ceil(1 / a_cal))} subsets"
        )
    split_p = np.array(
        [stats.mannwhitneyu(a, b, alternative="greater").pvalue for a, b in h], dtype=np.float64
    )
    scores = h.mean(axis=2).ravel()  # A then B of each pair
    p_in = (1 + (panel[None, :] >= scores[:, None]).sum(axis=1)) / (panel.size + 1)
    p_over = (1 + (panel[None, :] <= scores[:, None]).sum(axis=1)) / (panel.size + 1)
    return NullCalibration(
        split_test_fpr=float(np.mean(split_p < a_split)),
        calibrated_fpr=float(np.mean(p_in < a_cal)),
        over_unlearned_fpr=float(np.mean(p_over < a_cal)),
        n_pairs=int(h.shape[0]),
        alpha_split=a_split,
        alpha_calibrated=a_cal,
        split_p_values=split_p,
        calibrated_p_in=p_in.astype(np.float64),
        calibrated_p_over=p_over.astype(np.float64),
    )


def pool_null_checks(checks: Sequence[NullCalibration]) -> NullCalibration:
    """Pool the null checks of several independent draws into one set of rates."""
    if not checks:
        raise InputError("pool_null_checks needs at least one null check")
    levels = {(c.alpha_split, c.alpha_calibrated) for c in checks}
    if len(levels) != 1:
        raise InputError(f"null checks with different levels cannot be pooled: {sorted(levels)}")
    a_split, a_cal = levels.pop()
    split_p = np.concatenate([c.split_p_values for c in checks])
    p_in = np.concatenate([c.calibrated_p_in for c in checks])
    p_over = np.concatenate([c.calibrated_p_over for c in checks])
    return NullCalibration(
        split_test_fpr=float(np.mean(split_p < a_split)),
        calibrated_fpr=float(np.mean(p_in < a_cal)),
        over_unlearned_fpr=float(np.mean(p_over < a_cal)),
        n_pairs=int(split_p.size),
        alpha_split=a_split,
        alpha_calibrated=a_cal,
        split_p_values=split_p,
        calibrated_p_in=p_in,
        calibrated_p_over=p_over,
    )


def null_calibration(
    oot_acts: object,
    subset_size: int,
    sigma: float,
    n_pairs: int = 20,
    panel_size: int = 20,
    n_splits: int = 200,
    alpha_split: float = 0.01,
    alpha_calibrated: float = 0.05,
    estimator: Estimator = "biased",
    seed: int = 0,
    device: object | None = None,
) -> NullCalibration:
    """Measure both tests' false-positive rates on data known to be out-of-training.

    As an evaluation draws them (method §9): the panel's ``panel_size`` members are independent
    uniform subsets of the whole pool (e.g. D_te), the ``n_pairs`` pairs of disjoint subsets come
    from a random half of it — so each null subset is one more draw of the panel's scheme,
    exchangeable with its members; then :func:`null_check`.

    Args:
        oot_acts: ``(N, d)`` activations of the out-of-training pool. subset_size: n.
        sigma: numeric σ. n_pairs: number of pairs (default 20). panel_size: R ≥ 3.
        n_splits, estimator, seed, device: as in :func:`sde_core.stats.hsic.split_half_hsic_batch`.

    Raises:
        InputError: half the pool cannot hold a pair of disjoint subsets.
    """
    acts = as_float_matrix(oot_acts, "oot_acts")
    pool = acts.shape[0]
    n_pairs = check_int(n_pairs, "n_pairs", minimum=1)
    panel_size = check_int(panel_size, "panel_size", minimum=3)
    subset_size = check_int(subset_size, "subset_size", minimum=1)
    seed = _seed(seed)
    half = pool // 2
    if 2 * subset_size > half:
        raise InputError(
            f"the null check needs two disjoint subsets of {subset_size} rows outside the panel, "
            f"i.e. 2 × {subset_size} rows in the half of the pool the panel does not use, but "
            f"the pool has {pool} rows: lower the subset size to at most {max(1, half // 2)}"
        )
    rng = np.random.default_rng(seed)
    pair_rows = rng.permutation(pool)[pool - half :]
    panel = np.stack([rng.choice(pool, subset_size, replace=False) for _ in range(panel_size)])
    pairs = np.stack(
        [pair_rows[rng.permutation(half)[: 2 * subset_size]] for _ in range(n_pairs)]
    ).reshape(2 * n_pairs, subset_size)
    panel_h = split_half_hsic_batch(acts, panel, n_splits, sigma, estimator, seed, device)
    pair_h = split_half_hsic_batch(acts, pairs, n_splits, sigma, estimator, seed + 1, device)
    return null_check(
        pair_h.reshape(n_pairs, 2, -1), subset_scores(panel_h), alpha_split, alpha_calibrated
    )


@dataclass(frozen=True)
class OverUnlearningTest:
    """Model-level over-unlearning test (method §12).

    Attributes:
        p_value: Fisher's combination of the per-draw p-values (small: the targets are, as a
            whole, less dependent than unseen data).
        draw_p_values: per draw, ``(1 + #{r : s(OOT_r) ≤ median target score}) / (R + 1)``.
    """

    p_value: float
    draw_p_values: tuple[float, ...]


def over_unlearning_test(
    target_scores: Sequence[object], oot_panel_scores: Sequence[object]
) -> OverUnlearningTest:
    """Are the targets, as a whole, significantly *less* dependent than unseen data?

    For each independent draw b, the median score of its targets is ranked against its own OOT
    panel: ``p_b = (1 + #{r : s(OOT_r) ≤ median_b}) / (R + 1)``. When the targets are
    exchangeable with the panel the median of several targets concentrates near the panel's
    centre, so ``p_b`` is conservative; the draws are independent, so Fisher's method combines
    them: ``p = P(χ²_{2B} ≥ −2 Σ log p_b)``.

    Args:
        target_scores: per draw, the ``(t_b,)`` scores of its targets.
        oot_panel_scores: per draw, the ``(R,)`` scores of its OOT panel.
    """
    if len(target_scores) == 0 or len(target_scores) != len(oot_panel_scores):
        raise InputError("give the targets' and the OOT panel's scores of every draw (≥ 1)")
    draw_p = []
    for b, (t, oot) in enumerate(zip(target_scores, oot_panel_scores, strict=True)):
        med = float(np.median(_sample(t, f"target scores of draw {b}")))
        panel = _sample(oot, f"OOT panel scores of draw {b}")
        draw_p.append((1 + int(np.sum(panel <= med))) / (panel.size + 1))
    statistic = -2.0 * float(np.sum(np.log(draw_p)))
    p = float(stats.chi2.sf(statistic, 2 * len(draw_p)))
    return OverUnlearningTest(p_value=p, draw_p_values=tuple(draw_p))
