"""The evaluation engine: every statistic of method §3–6 and §9 for every model of a workspace.

Pipeline per model (all models share the same seeded subsets, so they are comparable):

1. activations of the chosen layer (and ``output`` for the classic metrics) on D_tr and D_te,
   from the on-disk activation cache when present
   (:func:`sde_core.inputs.activations.get_activations`);
2. σ from the rule; H for the references, the reference panels, the T targets and the
   controlled F1 subsets in two batched passes (:func:`sde_core.stats.hsic.split_half_batch_stats`,
   which also yields the spread control from the same Gram matrix);
3. the paper's evidence (reference U-test, JSD decisions, OTR, F1, dependence score), the
   calibrated evidence (panel check, verdicts, calibrated OTR/F1, null calibration, spread
   control), the MMD / Wasserstein baselines and the classic metrics (Acc_r/f/te, MIA ASR).

Results come back as tidy :class:`pandas.DataFrame` s plus the raw H arrays. With a
:class:`~sde_core.pipeline.store.ResultsStore`, each model is one unit of work: finished models are
read
back instead of recomputed, and an interrupted run keeps every finished model.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sde_core.errors import SettingsError
from sde_core.pipeline.model_inputs import ModelInputs, Progress, load_model_inputs
from sde_core.pipeline.settings import ALGORITHM_VERSION, EvalSettings
from sde_core.stats.baselines import nearest_reference_batch
from sde_core.stats.decision import (
    calibrated_otr,
    calibrated_verdict,
    controlled_f1,
    decide,
    dependence_score,
    disjoint_subsets,
    null_calibration_from_panel,
    out_of_training_rate,
    reference_check,
    reference_panel_check,
    subset_scores,
)
from sde_core.stats.hsic import resolve_sigma, split_half_batch_stats

__all__ = [
    "ALGORITHM_VERSION",
    "ROLES_WITH_FORGET_NEGATIVES",
    "EvalSettings",
    "EvaluationResult",
    "ModelEvaluation",
    "ModelInputs",
    "Progress",
    "SubsetPlan",
    "draw_subsets",
    "evaluate_arrays",
    "evaluate_workspace",
]

#: Roles whose controlled F1 uses D_f as the out-of-training pool (method §5: a model retrained
#: without D_f); every other role uses D_te.
ROLES_WITH_FORGET_NEGATIVES = frozenset({"retrained"})


# --------------------------------------------------------------------------------------------
# Subsets
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubsetPlan:
    """All subsets of one evaluation, as row indices (int64, each row a subset of size n).

    Train-side subsets index D_tr, test-side subsets index D_te.

    Attributes:
        it_ref: ``(1, n)`` S_IT ⊂ D_r. oot_ref: ``(1, n)`` S_OOT ⊂ D_te.
        it_panel: ``(R, n)`` ⊂ D_r. oot_panel: ``(R, n)`` ⊂ D_te (disjoint where possible).
        targets: ``(T, n)`` ⊂ D_f, each without replacement, independent across subsets.
        f1_pos: ``(T/2, n)`` ⊂ D_r (in-training). f1_neg_forget: ``(T/2, n)`` ⊂ D_f.
        f1_neg_test: ``(T/2, n)`` ⊂ D_te (out-of-training pools of method §5).
        forget, retain: the sorted D_f and D_r indices.
    """

    it_ref: np.ndarray
    oot_ref: np.ndarray
    it_panel: np.ndarray
    oot_panel: np.ndarray
    targets: np.ndarray
    f1_pos: np.ndarray
    f1_neg_forget: np.ndarray
    f1_neg_test: np.ndarray
    forget: np.ndarray
    retain: np.ndarray


def _independent(pool: np.ndarray, n: int, count: int, rng: np.random.Generator) -> np.ndarray:
    return np.stack([rng.choice(pool, n, replace=False) for _ in range(count)]).astype(np.int64)


def draw_subsets(
    n_train: int, n_test: int, forget: Sequence[int] | np.ndarray, settings: EvalSettings
) -> SubsetPlan:
    """Draw every subset of an evaluation reproducibly from ``settings.seed``.

    Raises:
        SettingsError: a pool (D_f, D_r or D_te) is smaller than the subset size.
    """
    f = np.unique(np.asarray(forget, dtype=np.int64))
    retain = np.setdiff1d(np.arange(n_train, dtype=np.int64), f)
    n = settings.subset_size
    for name, size in (
        ("forget set D_f", f.size),
        ("retained set D_r", retain.size),
        ("test set D_te", n_test),
    ):
        if size < n:
            raise SettingsError(
                f"subset size {n} is larger than the {name} ({size} rows): choose a subset "
                f"size of at most {min(f.size, retain.size, n_test)}"
            )
    rng = np.random.default_rng(settings.seed)
    half = settings.targets // 2
    test_pool = np.arange(n_test, dtype=np.int64)
    return SubsetPlan(
        it_ref=_independent(retain, n, 1, rng),
        oot_ref=_independent(test_pool, n, 1, rng),
        it_panel=retain[disjoint_subsets(retain.size, n, settings.panel_size, rng)],
        oot_panel=disjoint_subsets(n_test, n, settings.panel_size, rng),
        targets=_independent(f, n, settings.targets, rng),
        f1_pos=_independent(retain, n, half, rng),
        f1_neg_forget=_independent(f, n, half, rng),
        f1_neg_test=_independent(test_pool, n, half, rng),
        forget=f,
        retain=retain,
    )


# --------------------------------------------------------------------------------------------
# One model from arrays
# --------------------------------------------------------------------------------------------


@dataclass
class ModelEvaluation:
    """Everything computed for one model.

    Attributes:
        summary: one flat row (see :data:`SUMMARY_COLUMNS` of the ``models`` table).
        subsets: one row per scored subset (targets, F1 subsets, references, panels).
        arrays: raw H arrays, ``{"it_h": (K,), "oot_h": (K,), "targets_h": (T, K),
            "f1_h": (T, K), "panel_it_h": (R, K), "panel_oot_h": (R, K)}``.
    """

    summary: dict[str, Any]
    subsets: list[dict[str, Any]]
    arrays: dict[str, np.ndarray]


def _classic(inputs: ModelInputs, plan: SubsetPlan, seed: int) -> dict[str, float]:
    nan = float("nan")
    if inputs.train_probs is None or inputs.test_probs is None or inputs.train_labels is None:
        return {"acc_r": nan, "acc_f": nan, "acc_te": nan, "asr": nan}
    from sde_core.learning.metrics import metrics_from_probs

    m = metrics_from_probs(
        inputs.train_probs,
        inputs.train_labels,
        inputs.test_probs,
        inputs.test_labels,
        plan.forget,
        plan.retain,
        seed=seed,
    )
    return {"acc_r": m.acc_r, "acc_f": m.acc_f, "acc_te": m.acc_te, "asr": m.asr}


def _baseline_f1(
    inputs: ModelInputs,
    pos: np.ndarray,
    neg: np.ndarray,
    neg_on_train: bool,
    plan: SubsetPlan,
    sigma: float,
    count: int,
) -> dict[str, float]:
    if count == 0:
        return {"mmd_f1": float("nan"), "w2_f1": float("nan")}
    k = max(1, count // 2)
    it = inputs.train_acts[plan.it_ref[0]]
    oot = inputs.test_acts[plan.oot_ref[0]]
    neg_source = inputs.train_acts if neg_on_train else inputs.test_acts
    clouds = [inputs.train_acts[r] for r in pos[:k]] + [neg_source[r] for r in neg[:k]]
    truth = np.r_[np.ones(min(k, len(pos)), bool), np.zeros(min(k, len(neg)), bool)]
    out = {}
    for key, dist in (("mmd_f1", "mmd"), ("w2_f1", "wasserstein")):
        pred = [d.in_training for d in nearest_reference_batch(clouds, it, oot, dist, sigma)]
        out[key] = controlled_f1(truth, pred).f1
    return out


def evaluate_arrays(
    inputs: ModelInputs,
    plan: SubsetPlan,
    settings: EvalSettings,
    progress: Progress | None = None,
) -> ModelEvaluation:
    """Evaluate one model from its activations (a pure function of its arguments).

    Args:
        inputs: the model's activations, probabilities and labels.
        plan: the subsets from :func:`draw_subsets` (shared by all models).
        settings: the evaluation settings.
        progress: optional ``progress(stage, done, total)`` callback.
    """
    t0 = time.perf_counter()
    s = settings
    tr, te = inputs.train_acts, inputs.test_acts
    if tr.ndim != 2 or te.ndim != 2 or tr.shape[1] != te.shape[1]:
        raise SettingsError(
            f"train/test activations must be (n, d) with the same d; got {tr.shape} and {te.shape}"
        )
    if progress:
        progress(f"{inputs.name}: split-half HSIC", 0, 2)
    pooled_refs = np.concatenate([tr[plan.it_ref[0]], te[plan.oot_ref[0]]])
    sigma = resolve_sigma(s.sigma, pooled_refs, seed=s.seed)
    neg_on_train = inputs.role in ROLES_WITH_FORGET_NEGATIVES
    f1_neg = plan.f1_neg_forget if neg_on_train else plan.f1_neg_test
    n_pos, n_panel, n_t = len(plan.f1_pos), s.panel_size, s.targets

    train_sets = [plan.it_ref, plan.it_panel, plan.targets, plan.f1_pos]
    test_sets = [plan.oot_ref, plan.oot_panel]
    (train_sets if neg_on_train else test_sets).append(f1_neg)
    common = {
        "n_splits": s.splits,
        "sigma": sigma,
        "estimator": s.estimator,
        "device": None if s.device == "cpu" else s.device,
    }
    stats_tr = split_half_batch_stats(tr, np.concatenate(train_sets), seed=s.seed, **common)
    if progress:
        progress(f"{inputs.name}: split-half HSIC", 1, 2)
    stats_te = split_half_batch_stats(te, np.concatenate(test_sets), seed=s.seed + 1, **common)
    if progress:
        progress(f"{inputs.name}: split-half HSIC", 2, 2)

    h_tr, spread_tr = stats_tr.h, stats_tr.spread
    h_te, spread_te = stats_te.h, stats_te.spread
    it_h, panel_it_h = h_tr[0], h_tr[1 : 1 + n_panel]
    targets_h = h_tr[1 + n_panel : 1 + n_panel + n_t]
    pos_h = h_tr[1 + n_panel + n_t : 1 + n_panel + n_t + n_pos]
    oot_h, panel_oot_h = h_te[0], h_te[1 : 1 + n_panel]
    neg_h = (h_tr if neg_on_train else h_te)[-len(f1_neg) :]
    f1_h = np.concatenate([pos_h, neg_h])

    ref = reference_check(it_h, oot_h, alpha=s.alpha)
    it_scores, oot_scores = subset_scores(panel_it_h), subset_scores(panel_oot_h)
    panel = reference_panel_check(it_scores, oot_scores, alpha=s.alpha)

    def score_rows(kind: str, h: np.ndarray, spreads: np.ndarray, labels: np.ndarray | None):
        rows, raw, verdicts = [], [], []
        for i, hv in enumerate(h):
            d = decide(hv, it_h, oot_h, bins=s.bins)
            cv = calibrated_verdict(float(hv.mean()), it_scores, oot_scores, s.alpha_calibrated)
            raw.append(d.in_training)
            verdicts.append(cv.verdict)
            rows.append(
                {
                    "model": inputs.name,
                    "kind": kind,
                    "index": i,
                    "score": cv.score,
                    "h_median": float(np.median(hv)),
                    "spread": float(spreads[i]),
                    "d_it": d.d_it,
                    "d_oot": d.d_oot,
                    "decision": d.label if ref.valid else "inconclusive",
                    "in_training_raw": d.in_training,
                    "p_in": cv.p_in,
                    "p_out": cv.p_out,
                    "verdict": cv.verdict if panel.valid else "inconclusive",
                    "label_in_training": None if labels is None else bool(labels[i]),
                }
            )
        return rows, np.array(raw), verdicts

    tgt_rows, tgt_in, tgt_verdicts = score_rows(
        "target", targets_h, spread_tr[1 + n_panel : 1 + n_panel + n_t], None
    )
    truth = np.r_[np.ones(n_pos, bool), np.zeros(len(f1_neg), bool)]
    neg_spread = (spread_tr if neg_on_train else spread_te)[-len(f1_neg) :]
    f1_spread = np.r_[spread_tr[1 + n_panel + n_t : 1 + n_panel + n_t + n_pos], neg_spread]
    f1_rows, f1_in, f1_verdicts = score_rows("f1", f1_h, f1_spread, truth)

    panel_rows = [
        {
            "model": inputs.name,
            "kind": kind,
            "index": i,
            "score": float(sc),
            "h_median": float(np.median(h)),
            "spread": float(sp),
        }
        for kind, scores, hs, sps in (
            ("it_ref", [it_h.mean()], [it_h], spread_tr[:1]),
            ("oot_ref", [oot_h.mean()], [oot_h], spread_te[:1]),
            ("it_panel", it_scores, panel_it_h, spread_tr[1 : 1 + n_panel]),
            ("oot_panel", oot_scores, panel_oot_h, spread_te[1 : 1 + n_panel]),
        )
        for i, (sc, h, sp) in enumerate(zip(scores, hs, sps, strict=True))
    ]

    otr = out_of_training_rate(tgt_in)
    cal = calibrated_otr(tgt_verdicts)
    f1 = controlled_f1(truth, f1_in)
    cal_f1 = controlled_f1(truth, np.array(f1_verdicts) == "in-training")
    # S_OOT and the R panel subsets: R + 1 exchangeable OOT subsets, so each leave-one-out
    # comparison has a panel of R, as a target's calibrated verdict does.
    null = null_calibration_from_panel(
        np.vstack([oot_h[None, :], panel_oot_h]),
        s.null_pairs,
        s.alpha,
        s.alpha_calibrated,
        seed=s.seed,
    )
    all_scores = np.r_[it_scores, oot_scores, subset_scores(targets_h)]
    all_spreads = np.r_[
        spread_tr[1 : 1 + n_panel],
        spread_te[1 : 1 + n_panel],
        spread_tr[1 + n_panel : 1 + n_panel + n_t],
    ]
    with np.errstate(invalid="ignore", divide="ignore"):
        spread_corr = float(np.corrcoef(all_scores, all_spreads)[0, 1])
    summary: dict[str, Any] = {
        "name": inputs.name,
        "role": inputs.role,
        "method": inputs.method,
        "layer": s.layer,
        "dim": int(tr.shape[1]),
        "sigma": float(sigma),
        "reference_p": ref.p_value,
        "references_valid": ref.valid,
        "otr": otr.rate,
        "otr_lo": otr.lo,
        "otr_hi": otr.hi,
        "f1": f1.f1,
        "f1_precision": f1.precision,
        "f1_recall": f1.recall,
        "dependence_score": dependence_score(targets_h, it_h, oot_h),
        "panel_p": panel.p_value,
        "panel_valid": panel.valid,
        "calibrated_otr": cal.rate if panel.valid else float("nan"),
        "calibrated_otr_raw": cal.rate,
        "calibrated_otr_lo": cal.lo,
        "calibrated_otr_hi": cal.hi,
        "n_in_training": int(sum(v == "in-training" for v in tgt_verdicts)),
        "n_out_of_training": int(sum(v == "out-of-training" for v in tgt_verdicts)),
        "n_inconclusive": int(sum(v == "inconclusive" for v in tgt_verdicts)),
        "calibrated_f1": cal_f1.f1,
        "null_split_fpr": null.split_test_fpr,
        "null_calibrated_fpr": null.calibrated_fpr,
        "score_spread_corr": spread_corr,
        **_baseline_f1(inputs, plan.f1_pos, f1_neg, neg_on_train, plan, sigma, s.baseline_targets),
        **_classic(inputs, plan, s.seed),
        "seconds": float("nan") if inputs.seconds is None else float(inputs.seconds),
    }
    summary["eval_seconds"] = time.perf_counter() - t0
    arrays = {
        "it_h": it_h,
        "oot_h": oot_h,
        "targets_h": targets_h,
        "f1_h": f1_h,
        "panel_it_h": panel_it_h,
        "panel_oot_h": panel_oot_h,
    }
    return ModelEvaluation(summary=summary, subsets=tgt_rows + f1_rows + panel_rows, arrays=arrays)


# --------------------------------------------------------------------------------------------
# Whole workspaces
# --------------------------------------------------------------------------------------------


@dataclass
class EvaluationResult:
    """The result of :func:`evaluate_workspace`.

    Attributes:
        settings: the settings used. workspace_hash: content hash of the workspace.
        models: one row per model (``name`` first). subsets: one row per scored subset.
        arrays: ``{"<model>/<name>": array}`` raw H values (see :class:`ModelEvaluation`).
        run_id: the store's run id (None without a store). cached_models: models read back.
    """

    settings: EvalSettings
    workspace_hash: str
    models: pd.DataFrame
    subsets: pd.DataFrame
    arrays: dict[str, np.ndarray]
    run_id: int | None = None
    cached_models: list[str] = field(default_factory=list)

    def model_arrays(self, name: str) -> dict[str, np.ndarray]:
        """The raw H arrays of one model, keyed without the model prefix."""
        prefix = f"{name}/"
        return {k[len(prefix) :]: v for k, v in self.arrays.items() if k.startswith(prefix)}

    def to_json_dict(self) -> dict[str, Any]:
        """The CLI's JSON document (method §10)."""

        def num(x: Any) -> Any:
            if x is None:
                return None
            if isinstance(x, (bool, np.bool_)):
                return bool(x)
            value = float(x)
            return None if not np.isfinite(value) else value

        models = {}
        for row in self.models.to_dict("records"):
            models[row["name"]] = {
                "role": row["role"],
                "method": row["method"],
                "layer": row["layer"],
                "sigma": num(row["sigma"]),
                "reference_p": num(row["reference_p"]),
                "references_valid": bool(row["references_valid"]),
                "otr": num(row["otr"]),
                "otr_ci": [num(row["otr_lo"]), num(row["otr_hi"])],
                "f1": num(row["f1"]),
                "calibrated_otr": num(row["calibrated_otr"]),
                "dependence_score": num(row["dependence_score"]),
                "acc_r": num(row["acc_r"]),
                "acc_f": num(row["acc_f"]),
                "acc_te": num(row["acc_te"]),
                "asr": num(row["asr"]),
                "panel_valid": bool(row["panel_valid"]),
                "calibrated_f1": num(row["calibrated_f1"]),
                "null_split_fpr": num(row["null_split_fpr"]),
                "null_calibrated_fpr": num(row["null_calibrated_fpr"]),
                "mmd_f1": num(row["mmd_f1"]),
                "w2_f1": num(row["w2_f1"]),
                "seconds": num(row["seconds"]),
            }
        return {
            "settings": self.settings.result_key(),
            "workspace_hash": self.workspace_hash,
            "models": models,
        }


def evaluate_model_job(
    workspace: Any,
    bundle: Any,
    plan: SubsetPlan,
    model: str,
    settings: EvalSettings,
    cache_dir: str,
    progress: Progress | None = None,
) -> ModelEvaluation:
    """One model's evaluation as a self-contained job (run by an :mod:`sde_core.pipeline.engine`).

    Args:
        workspace: the :class:`~sde_core.pipeline.workspace.Workspace` (its files on storage every
            worker can read). bundle: the loaded dataset. plan: the shared subsets.
        model: the model entry's name. settings: evaluation settings.
        cache_dir: the activation cache folder (shared storage on a cluster).
        progress: optional callback (local engine only; not sent to remote workers).
    """
    from sde_core.inputs.activations import ActivationCache

    entry = next(m for m in workspace.models if m.name == model)
    inputs = load_model_inputs(
        entry, workspace, bundle, settings, ActivationCache(cache_dir), progress
    )
    return evaluate_arrays(inputs, plan, settings, progress)


def evaluate_workspace(
    workspace: Any,
    settings: EvalSettings | None = None,
    *,
    models: Sequence[str] | None = None,
    store: Any = None,
    cache_dir: str | Path | None = None,
    progress: Progress | None = None,
    engine: Any = None,
) -> EvaluationResult:
    """Evaluate every (or the named) model of a workspace.

    Args:
        workspace: a :class:`sde_core.pipeline.workspace.Workspace` or the path of its folder/toml.
        settings: evaluation settings (default: the workspace's ``[defaults]``).
        models: names of the models to evaluate (default: all, in workspace order).
        store: a :class:`sde_core.pipeline.store.ResultsStore`; finished models are read back, new
        ones
            written as they finish.
        cache_dir: activation cache folder (default ``<workspace>/.sde-cache/activations``).
        progress: ``progress(stage, done, total)`` callback.
        engine: an :class:`sde_core.pipeline.engine.Engine` that runs one job per model (default:
        the
            in-process :class:`~sde_core.pipeline.engine.LocalEngine`). Results always come back to
            this
            process, which alone writes the store.

    Raises:
        SettingsError, WorkspaceError, DataError, CheckpointError, ActivationError.
    """
    from sde_core.inputs.data import DatasetSpec, load_dataset, load_index_file
    from sde_core.pipeline.engine import Job, LocalEngine, Resources
    from sde_core.pipeline.workspace import Workspace, load_workspace, workspace_hash

    ws = workspace if isinstance(workspace, Workspace) else load_workspace(workspace)
    if settings is None:
        settings = EvalSettings.from_mapping(asdict(ws.defaults))
    bundle = load_dataset(DatasetSpec.from_dict(ws.dataset, base_dir=ws.root))
    forget = load_index_file(ws.path(ws.forget_indices), len(bundle.train))
    entries = list(ws.models)
    if models is not None:
        names = {m.name for m in entries}
        missing = sorted(set(models) - names)
        if missing:
            raise SettingsError(f"unknown models {missing}; the workspace has {sorted(names)}")
        entries = [m for m in entries if m.name in set(models)]
    plan = draw_subsets(len(bundle.train), len(bundle.test), forget, settings)
    ws_hash = workspace_hash(ws, data_fingerprint=bundle.fingerprint)
    cache = str(cache_dir or ws.root / ".sde-cache" / "activations")
    run = store.open_run(ws_hash, settings.result_key()) if store is not None else None
    done = store.finished_units(run.id) if run is not None else set()
    engine = engine or LocalEngine()
    local = isinstance(engine, LocalEngine)
    gpus = 0.0 if settings.device == "cpu" else 1.0
    jobs = [
        Job(
            key=entry.name,
            fn=evaluate_model_job,
            kwargs={
                "workspace": ws,
                "bundle": bundle,
                "plan": plan,
                "model": entry.name,
                "settings": settings,
                "cache_dir": cache,
                "progress": progress if local else None,
            },
            resources=Resources(cpus=1.0, gpus=gpus),
            label=f"evaluate {entry.name}",
        )
        for entry in entries
        if entry.name not in done
    ]
    cached = [e.name for e in entries if e.name in done]
    summaries: list[dict[str, Any]] = []
    subsets: list[dict[str, Any]] = []
    arrays: dict[str, np.ndarray] = {}

    def on_result(job: Job, ev: ModelEvaluation) -> None:
        named = {f"{job.key}/{k}": v for k, v in ev.arrays.items()}
        if run is not None:
            store.put_unit(run.id, job.key, {"models": [ev.summary], "subsets": ev.subsets}, named)
        else:
            summaries.append(ev.summary)
            subsets.extend(ev.subsets)
            arrays.update(named)

    def job_progress(finished: int, total: int) -> None:
        if progress:
            progress("models", len(cached) + finished, len(entries))

    engine.run(jobs, on_result=on_result, progress=job_progress)
    if progress:
        progress("models", len(entries), len(entries))
    wanted = [m.name for m in entries]
    if run is not None:
        if set(wanted) >= {m.name for m in ws.models}:
            store.mark_complete(run.id)
        model_df = store.rows(run.id, "models")
        model_df = model_df[model_df["name"].isin(wanted)]
        subset_df = store.rows(run.id, "subsets")
        subset_df = subset_df[subset_df["model"].isin(wanted)].reset_index(drop=True)
        arrays = {
            k: store.array(run.id, k)
            for k in store.array_names(run.id)
            if k.split("/", 1)[0] in set(wanted)
        }
    else:
        model_df, subset_df = pd.DataFrame(summaries), pd.DataFrame(subsets)
    # Workspace order, whatever order the engine finished the models in.
    model_df = model_df.set_index("name").loc[wanted].reset_index()
    if len(subset_df):
        rank = subset_df["model"].map({name: i for i, name in enumerate(wanted)})
        subset_df = subset_df.iloc[np.argsort(rank.to_numpy(), kind="stable")]
        subset_df = subset_df.reset_index(drop=True)
    return EvaluationResult(
        settings=settings,
        workspace_hash=ws_hash,
        models=model_df,
        subsets=subset_df,
        arrays=arrays,
        run_id=None if run is None else run.id,
        cached_models=cached,
    )
