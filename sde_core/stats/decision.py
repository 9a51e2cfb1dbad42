"""Decisions and headline metrics of SDE (method §3–5) and the calibrated evidence of method §9.

Two families of evidence live here, shown side by side by the dashboard and the CLI:

* **The paper's procedure** — :func:`reference_check` (one-sided Mann-Whitney U over the K
  split values of one S_IT vs one S_OOT), :func:`decide` (Jensen–Shannon divergence between
  histograms of H), :func:`out_of_training_rate`, :func:`controlled_f1` and
  :func:`dependence_score`.
* **Calibrated subset-level evidence** — a panel of R reference subsets per side, one score
  ``s(S) = mean H(S)`` per subset: :func:`reference_panel_check`, :func:`calibrated_verdict`
  (rank p-values ``p_in``/``p_out``), :func:`null_calibration` (false-positive rates of both
  tests on data known to be out-of-training) and the spread control
  (:func:`sde_core.stats.hsic.kernel_spread`).

The split-level U-test treats the K splits of one subset as independent samples, which they are
not; :func:`null_calibration` measures how often it fires on two subsets of the *same* pool.
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
    "CalibratedVerdict",
    "Decision",
    "F1Result",
    "NullCalibration",
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
    "out_of_training_rate",
    "reference_check",
    "reference_panel_check",
    "subset_scores",
    "wilson_interval",
]

Verdict = Literal["in-training", "out-of-training", "inconclusive"]


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


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (k successes out of n)."""
    n, k = check_int(n, "n", minimum=0), check_int(k, "k", minimum=0)
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
    """
    t = _sample(as_float_array(target_h, "target_h").ravel(), "target_h")
    med_it = float(np.median(_sample(it_h, "it_h")))
    med_oot = float(np.median(_sample(oot_h, "oot_h")))
    span = med_it - med_oot
    if span == 0.0:
        return float("nan")
    return (float(np.median(t)) - med_oot) / span


# --------------------------------------------------------------------------------------------
# Calibrated subset-level evidence (method §9)
# --------------------------------------------------------------------------------------------


def subset_scores(h: object) -> np.ndarray:
    """Subset scores ``s(S) = mean of H(S)`` over the splits.

    Args:
        h: ``(T, K)`` split-half HSIC values (one row per subset) or a ``(K,)`` vector.

    Returns:
        ``(T,)`` float64 array (``(1,)`` for a single vector).
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

    Each panel subset contributes one score, so the test's samples are independent (unlike the
    split-level :func:`reference_check`).
    """
    return _mwu_greater(
        _sample(it_scores, "it_scores", min_size=2),
        _sample(oot_scores, "oot_scores", min_size=2),
        _alpha(alpha),
    )


@dataclass(frozen=True)
class CalibratedVerdict:
    """Calibrated verdict for one target (method §9).

    Attributes:
        p_in: ``(1 + #{OOT_r ≥ s_t}) / (R_oot + 1)`` — small: more dependent than unseen data.
        p_out: ``(1 + #{IT_r ≤ s_t}) / (R_it + 1)`` — small: less dependent than training data.
        verdict: ``"in-training"`` if p_in < α, else ``"out-of-training"`` if p_out < α, else
            ``"inconclusive"``. (When both are small the verdict is in-training: the evaluation
            never certifies forgetting on ambiguous evidence.)
        score: the target's subset score s_t.
    """

    p_in: float
    p_out: float
    verdict: Verdict
    score: float


def calibrated_verdict(
    target_score: float, it_scores: object, oot_scores: object, alpha: float = 0.05
) -> CalibratedVerdict:
    """Rank-based, finite-sample valid verdict of a target against the reference panels.

    Under exchangeability of the target with the OOT panel (the target was never trained on),
    ``P(p_in ≤ α) ≤ α``; likewise for p_out with the IT panel.

    Args:
        target_score: s_t = mean split-half HSIC of the target.
        it_scores: ``(R_it,)`` scores of in-training reference subsets.
        oot_scores: ``(R_oot,)`` scores of out-of-training reference subsets.
        alpha: level of both one-sided tests (default 0.05).
    """
    s = _sample([target_score], "target_score")[0]
    it = _sample(it_scores, "it_scores")
    oot = _sample(oot_scores, "oot_scores")
    a = _alpha(alpha)
    p_in = (1 + int(np.sum(oot >= s))) / (oot.size + 1)
    p_out = (1 + int(np.sum(it <= s))) / (it.size + 1)
    verdict: Verdict
    if p_in < a:
        verdict = "in-training"
    elif p_out < a:
        verdict = "out-of-training"
    else:
        verdict = "inconclusive"
    return CalibratedVerdict(p_in=p_in, p_out=p_out, verdict=verdict, score=float(s))


def calibrated_otr(verdicts: Sequence[str], confidence: float = 0.95) -> RateEstimate:
    """Calibrated OTR: share of targets whose calibrated verdict is out-of-training."""
    if isinstance(verdicts, (str, bytes)) or not isinstance(verdicts, (Sequence, np.ndarray)):
        kind = type(verdicts).__name__
        raise InputError(f"verdicts must be a list of verdict strings; got {kind}")
    v = np.asarray(list(verdicts), dtype=object)
    if v.size == 0:
        raise InputError("calibrated_otr needs at least one verdict")
    unknown = set(v.tolist()) - {"in-training", "out-of-training", "inconclusive"}
    if unknown:
        raise InputError(f"unknown verdicts {sorted(unknown)}")
    return _rate(v == "out-of-training", confidence)


@dataclass(frozen=True)
class NullCalibration:
    """False-positive rates on pairs of disjoint out-of-training subsets (method §9).

    Attributes:
        split_test_fpr: share of pairs (A, B) where the paper's split-level U-test says
            ``H(A) > H(B)`` at ``alpha_split`` — ideally ≈ alpha_split.
        calibrated_fpr: share of pairs whose A gets the calibrated verdict "in-training"
            against an OOT panel drawn from the same pool — ideally ≤ alpha_calibrated.
        n_pairs: number of pairs. alpha_split, alpha_calibrated: levels used.
        split_p_values: ``(n_pairs,)`` U-test p-values. calibrated_p_in: ``(n_pairs,)`` p_in.
    """

    split_test_fpr: float
    calibrated_fpr: float
    n_pairs: int
    alpha_split: float
    alpha_calibrated: float
    split_p_values: np.ndarray
    calibrated_p_in: np.ndarray


def disjoint_subsets(
    pool_size: int, subset_size: int, count: int, rng: np.random.Generator
) -> np.ndarray:
    """``count`` subsets of ``subset_size`` rows of a pool, disjoint where the pool allows.

    Rows are dealt from successive random permutations of the pool, so subsets dealt from the
    same permutation never overlap and each subset is free of repeats.

    Returns:
        ``(count, subset_size)`` int64 row indices into the pool.
    """
    pool_size = check_int(pool_size, "pool_size", minimum=0)
    subset_size = check_int(subset_size, "subset_size", minimum=1)
    count = check_int(count, "count", minimum=0)
    if not isinstance(rng, np.random.Generator):
        raise InputError(f"rng must be a numpy.random.Generator; got {type(rng).__name__}")
    if subset_size > pool_size:
        raise InputError(
            f"cannot draw subsets of {subset_size} rows from a pool of {pool_size}: choose a "
            f"subset size between 1 and {pool_size}"
        )
    out = np.empty((count, subset_size), dtype=np.int64)
    per_perm = pool_size // subset_size
    perm = rng.permutation(pool_size)
    for c in range(count):
        slot = c % per_perm
        if slot == 0 and c:
            perm = rng.permutation(pool_size)
        out[c] = perm[slot * subset_size : (slot + 1) * subset_size]
    return out


def null_calibration_from_panel(
    panel_h: object,
    n_pairs: int = 20,
    alpha_split: float = 0.01,
    alpha_calibrated: float = 0.05,
    seed: int = 0,
) -> NullCalibration:
    """Both tests' false-positive rates on a panel of out-of-training subsets.

    ``n_pairs`` ordered pairs (A, B) of distinct panel subsets are drawn with the seed. For each
    pair, the paper's split-level U-test of H(A) > H(B) is run at ``alpha_split``, and A's
    calibrated ``p_in`` is taken against the *other* R − 1 panel scores (leave-one-out, so A is
    exchangeable with its panel) at ``alpha_calibrated``.

    Args:
        panel_h: ``(R, K)`` split-half HSIC of R out-of-training subsets (disjoint where the
            pool allows), e.g. S_OOT plus the OOT reference panel of an evaluation. The
            leave-one-out p-value is at least ``1/R``, so R must exceed ``1/alpha_calibrated``
            (21 subsets for α = 0.05) or the calibrated rate would be 0 by construction.
    """
    h = as_float_array(panel_h, "panel_h")
    if h.ndim != 2 or h.shape[0] < 3 or h.shape[1] < 2:
        raise InputError(
            f"panel_h must be (R, K) with R ≥ 3 subsets and K ≥ 2 splits; got shape {h.shape}"
        )
    n_pairs = check_int(n_pairs, "n_pairs", minimum=1)
    a_split = _alpha(alpha_split, "alpha_split")
    a_cal = _alpha(alpha_calibrated, "alpha_calibrated")
    seed = _seed(seed)
    scores = subset_scores(h)
    n_panel = h.shape[0]
    if 1.0 / n_panel >= a_cal:
        raise InputError(
            f"with {n_panel} panel subsets the smallest leave-one-out p-value is 1/{n_panel} ≥ "
            f"alpha_calibrated={a_cal}, so the calibrated false-positive rate would be 0 by "
            f"construction: give more than {int(np.ceil(1 / a_cal))} subsets"
        )
    rng = np.random.default_rng(seed)
    pairs = np.array([rng.choice(n_panel, 2, replace=False) for _ in range(n_pairs)])
    split_p = np.array(
        [stats.mannwhitneyu(h[a], h[b], alternative="greater").pvalue for a, b in pairs]
    )
    p_in = np.array(
        [(1 + np.sum(np.delete(scores, a) >= scores[a])) / n_panel for a in pairs[:, 0]]
    )
    return NullCalibration(
        split_test_fpr=float(np.mean(split_p < a_split)),
        calibrated_fpr=float(np.mean(p_in < a_cal)),
        n_pairs=int(n_pairs),
        alpha_split=a_split,
        alpha_calibrated=a_cal,
        split_p_values=split_p,
        calibrated_p_in=p_in,
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

    Draws ``panel_size + 1`` subsets of ``subset_size`` rows from the pool (e.g. D_te;
    disjoint where it allows) — so each leave-one-out comparison has a panel of
    ``panel_size``, as a calibrated verdict does — computes their split-half HSIC and applies
    :func:`null_calibration_from_panel`.

    Args:
        oot_acts: ``(N, d)`` activations of the out-of-training pool. subset_size: n.
        sigma: numeric σ. n_pairs: number of pairs (default 20). panel_size: R ≥ 3.
        n_splits, estimator, seed, device: as in :func:`sde_core.stats.hsic.split_half_hsic_batch`.
    """
    acts = as_float_matrix(oot_acts, "oot_acts")
    pool = acts.shape[0]
    panel_size = check_int(panel_size, "panel_size", minimum=3)
    subset_size = check_int(subset_size, "subset_size", minimum=1)
    if 2 * subset_size > pool:
        raise InputError(
            f"the null check needs disjoint subsets of {subset_size} rows but the pool has "
            f"{pool}: lower the subset size to at most {pool // 2}"
        )
    rng = np.random.default_rng(seed)
    subsets = disjoint_subsets(pool, subset_size, panel_size + 1, rng)
    h = split_half_hsic_batch(
        acts,
        subsets,
        n_splits=n_splits,
        sigma=sigma,
        estimator=estimator,
        seed=seed,
        device=device,
    )
    return null_calibration_from_panel(h, n_pairs, alpha_split, alpha_calibrated, seed)
