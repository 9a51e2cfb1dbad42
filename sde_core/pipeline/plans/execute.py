"""PlanJob execution: pure functions of a job, its dependencies' artefacts and the context."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.common.fsio import atomic_write_text
from sde_core.errors import PlanError
from sde_core.pipeline.evaluation.metric_table import (
    ACC_F,
    ACC_R,
    ACC_TE,
    ASR,
    CALIBRATED_F1,
    CALIBRATED_OTR,
    DEPENDENCE_SCORE,
    F1,
    METRICS,
    MMD_F1,
    NULL_CALIBRATED_FPR,
    OTR,
    OVER_UNLEARNED_RATE,
    OVER_UNLEARNING_P,
    PANEL_P,
    REFERENCE_P,
    SCORE_SPREAD_CORR_WITHIN,
    W2_F1,
    raw_column,
)
from sde_core.pipeline.plans.graph import (
    JobContext,
    JobResult,
    PlanJob,
    artifact_dir,
    forget_indices,
)
from sde_core.pipeline.plans.spec import Setup


@functools.lru_cache(maxsize=4)
def _bundle_cached(spec_json: str, work: str) -> Any:
    from sde_core.inputs.data import DatasetSpec, load_dataset

    spec = json.loads(spec_json)
    return load_dataset(DatasetSpec.from_dict(spec, base_dir=work))


def _bundle(dataset: Mapping[str, Any], work: Path) -> Any:
    """The loaded dataset of a job (relative roots resolved against ``work``; cached)."""
    return _bundle_cached(json.dumps(dataset, sort_keys=True), str(Path(work).resolve()))


def _forget_of(spec: Mapping[str, Any] | None, n_train: int) -> np.ndarray | None:
    return None if spec is None else forget_indices(n_train, spec["ratio"], spec["seed"])


def _manifest(job: PlanJob, work: Path) -> dict[str, Any] | None:
    path = artifact_dir(job, work) / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _write_manifest(job: PlanJob, work: Path, info: Mapping[str, Any]) -> None:
    document = {"job": job.key, "kind": job.kind, "spec": job.spec, **info}
    atomic_write_text(artifact_dir(job, work) / "manifest.json", json.dumps(document, indent=1))


def _accuracy(model: Any, dataset: Any, device: str) -> float:
    """Top-1 accuracy in %; NaN for a denoiser (it has no classes, method §14)."""
    from sde_core.families.registry import family_of
    from sde_core.learning.metrics import accuracy_from_probs, predict_probs

    if not family_of(model).has_class_outputs:
        return math.nan
    probs, labels = predict_probs(model, dataset, device=device)
    return accuracy_from_probs(probs, labels)


def _run_train(job: PlanJob, ctx: JobContext) -> JobResult:
    """Train h_or (on D_tr) or h_re (on D_r) with checkpoints; reuse a finished artefact."""
    import torch
    from torch.utils.data import Subset

    from sde_core.inputs.architectures import build_model
    from sde_core.learning.training import TrainConfig, train

    info = _manifest(job, ctx.work)
    reused = info is not None
    if info is None:
        s = Setup(**job.spec["setup"])
        bundle = _bundle(s.dataset, ctx.work)
        forget = _forget_of(job.spec["forget"], len(bundle.train))
        data = bundle.train
        if forget is not None:
            data = Subset(bundle.train, np.setdiff1d(np.arange(len(bundle.train)), forget).tolist())
        config = TrainConfig.from_dict({**s.train, "seed": job.spec["seed"], "device": ctx.device})
        torch.manual_seed(config.seed)
        model = build_model(s.arch, **s.arch_kwargs)
        out = artifact_dir(job, ctx.work)
        result = train(model, data, config, out, arch=s.arch, arch_kwargs=s.arch_kwargs)
        info = {
            "seconds": result.seconds,
            "final_loss": result.losses[-1],
            "epochs": config.epochs,
            "acc_train": _accuracy(result.model, data, ctx.device),
            "acc_test": _accuracy(result.model, bundle.test, ctx.device),
            "checkpoints": {repr(f): p.name for f, p in result.checkpoints.items()},
            "init": result.init_path.name if result.init_path else None,
        }
        _write_manifest(job, ctx.work, info)
    row = {
        **job.labels,
        "job": job.key,
        **{k: info[k] for k in ("epochs", "final_loss", "acc_train", "acc_test", "seconds")},
        "reused": reused,
        "params": json.dumps(job.spec["setup"]["train"], sort_keys=True),
    }
    return JobResult(tables={"models": [row]})


def _checkpoint_file(job: PlanJob, work: Path, fraction: float) -> Path:
    """The weights file of a ``train`` (fraction of training; 0 = initial) or ``unlearn`` job."""
    info = _manifest(job, work)
    if info is None:
        raise PlanError(f"job {job.key}: its artefact is missing in {work}; run the job first")
    folder = artifact_dir(job, work)
    if job.kind == "unlearn":
        return folder / info["model"]
    if math.isclose(fraction, 0.0):
        return folder / info["init"]
    for frac, name in info["checkpoints"].items():
        if math.isclose(float(frac), fraction):
            return folder / name
    raise PlanError(f"job {job.key} saved no checkpoint at fraction {fraction:g}")


def _run_unlearn(job: PlanJob, ctx: JobContext, original: PlanJob) -> JobResult:
    """Apply an unlearning method to the original model's final checkpoint."""
    from sde_core.inputs.architectures import build_model
    from sde_core.inputs.models import load_checkpoint
    from sde_core.learning.training import TrainConfig, save_weights
    from sde_core.learning.unlearning import UnlearnData, unlearn

    info = _manifest(job, ctx.work)
    reused = info is not None
    if info is None:
        s = Setup(**original.spec["setup"])
        bundle = _bundle(s.dataset, ctx.work)
        forget = _forget_of(job.spec["forget"], len(bundle.train))
        model = load_checkpoint(_checkpoint_file(original, ctx.work, 1.0), arch=s.arch)
        init = load_checkpoint(_checkpoint_file(original, ctx.work, 0.0), arch=s.arch)
        data = UnlearnData.from_forget(
            bundle.train,
            forget,
            num_classes=bundle.num_classes or None,
            train_config=TrainConfig.from_dict(
                {**s.train, "seed": original.spec["seed"], "device": ctx.device}
            ),
            init_state=init.state_dict(),
            model_factory=lambda: build_model(s.arch, **s.arch_kwargs),
            device=ctx.device,
        )
        result = unlearn(job.spec["method"], model, data, **job.spec["params"])
        folder = artifact_dir(job, ctx.work)
        save_weights(
            result.model.cpu(), folder / "model.safetensors", arch=s.arch, arch_kwargs=s.arch_kwargs
        )
        info = {
            "seconds": result.seconds,
            "model": "model.safetensors",
            "params": result.params_dict(),
        }
        _write_manifest(job, ctx.work, info)
    nan = float("nan")
    row = {
        **job.labels,
        "job": job.key,
        "epochs": info["params"].get("epochs") or 0,
        "final_loss": nan,
        "acc_train": nan,
        "acc_test": nan,
        "seconds": info["seconds"],
        "reused": reused,
        "params": json.dumps(info["params"], sort_keys=True),
    }
    return JobResult(tables={"models": [row]})


_POINT_COLUMNS = (
    "dim",
    "sigma",
    "draws",
    *METRICS[F1.key].columns,
    "f1_precision",
    "f1_recall",
    *METRICS[OTR.key].columns,
    "references_valid",
    REFERENCE_P.key,
    DEPENDENCE_SCORE.key,
    raw_column(DEPENDENCE_SCORE.key),
    "panel_valid",
    PANEL_P.key,
    *METRICS[CALIBRATED_OTR.key].columns,
    CALIBRATED_F1.key,
    raw_column(CALIBRATED_F1.key),
    OVER_UNLEARNED_RATE.key,
    OVER_UNLEARNING_P.key,
    "inconclusive_reason",
    "null_pairs",
    "null_split_fpr",
    NULL_CALIBRATED_FPR.key,
    "score_spread_corr",
    SCORE_SPREAD_CORR_WITHIN.key,
    MMD_F1.key,
    W2_F1.key,
    ACC_R.key,
    ACC_F.key,
    ACC_TE.key,
    ASR.key,
    "eval_seconds",
)


def _run_evaluate(job: PlanJob, ctx: JobContext, source: PlanJob) -> JobResult:
    """Evaluate one model at one setting
    (:func:`sde_core.pipeline.evaluation.run_driver.evaluate_arrays`)."""
    from sde_core.inputs.activation_cache import ActivationCache
    from sde_core.inputs.activations import get_activations
    from sde_core.inputs.denoisers import parse_noise_layer
    from sde_core.learning.metrics import accuracy_from_probs
    from sde_core.pipeline.evaluation.plan import draw_subsets
    from sde_core.pipeline.evaluation.run_driver import evaluate_arrays
    from sde_core.pipeline.model_inputs import ModelInputs
    from sde_core.pipeline.settings import EvalSettings

    sp = job.spec
    bundle = _bundle(sp["dataset"], ctx.work)
    n_train, n_test = len(bundle.train), len(bundle.test)
    forget = _forget_of(sp["forget"], n_train)
    assert forget is not None
    retain = np.setdiff1d(np.arange(n_train), forget)
    ckpt = _checkpoint_file(source, ctx.work, sp["checkpoint"])
    denoiser = parse_noise_layer(sp["layer"])[1] is not None  # no class outputs (method §14)
    layers = [sp["layer"]] if denoiser else list(dict.fromkeys([sp["layer"], "output"]))
    cache = ActivationCache(Path(ctx.work) / "activations")
    acts = {
        split: get_activations(
            ckpt, bundle, split, layers, cache, arch=sp["arch"], device=ctx.device
        )
        for split in ("train", "test")
    }
    train_acts = np.asarray(acts["train"][sp["layer"]], dtype=np.float64)
    test_acts = np.asarray(acts["test"][sp["layer"]], dtype=np.float64)
    settings = EvalSettings.from_mapping(
        {
            **sp["eval"],
            "layer": sp["layer"],
            "subset_size": sp["subset_size"],
            "seed": sp["seed"],
            "sigma": sp["sigma"],  # any σ of the one syntax, f·√d included
        }
    )
    plan = draw_subsets(n_train, n_test, forget, settings)
    with_asr = sp["classic"] == ASR.key and not denoiser
    inputs = ModelInputs(
        name=job.labels["model"],
        role=job.labels.get("role", ""),
        train_acts=train_acts,
        test_acts=test_acts,
        train_probs=acts["train"]["output"] if with_asr else None,
        test_probs=acts["test"]["output"] if with_asr else None,
        train_labels=bundle.train_labels if with_asr else None,
        test_labels=bundle.test_labels if with_asr else None,
    )
    # the F1 negatives: D_f for a model retrained without it (method §5, §4.1), D_te otherwise
    ev = evaluate_arrays(inputs, plan, settings, f1_negatives=sp["f1_negatives"])
    row = {**job.labels, **{k: ev.summary[k] for k in _POINT_COLUMNS}}
    if denoiser:
        row.update(acc_r=math.nan, acc_f=math.nan, acc_te=math.nan)
    elif not with_asr:
        p_tr, p_te = acts["train"]["output"], acts["test"]["output"]
        row[ACC_R.key] = accuracy_from_probs(p_tr[retain], bundle.train_labels[retain])
        row[ACC_F.key] = accuracy_from_probs(p_tr[forget], bundle.train_labels[forget])
        row[ACC_TE.key] = accuracy_from_probs(p_te, bundle.test_labels)
    if job.labels.get("param") == "sigma":
        row["x"] = row["sigma"]
    tables: dict[str, list[dict[str, Any]]] = {"points": [row]}
    arrays: dict[str, np.ndarray] = {}
    if sp["histogram"]:
        sets = {  # draw 0's references and its first target (judged against them)
            "S_IT": ev.arrays["it_h"],
            "S_OOT": ev.arrays["oot_h"],
            "S_target": ev.arrays["targets_h"][0],
        }
        keep = ("plan", "variant", "seed", "model", "role")
        tables["h_values"] = [
            {**{k: job.labels[k] for k in keep}, "set": name, "split": i, "h": float(h)}
            for name, values in sets.items()
            for i, h in enumerate(values)
        ]
        arrays = {f"{job.key}/{name}": np.asarray(values) for name, values in sets.items()}
    return JobResult(tables=tables, arrays=arrays)


def _run_toy(job: PlanJob, ctx: JobContext) -> JobResult:
    """App. A.4: H of same-batch vs cross-batch subsets over training steps (fixed batches)."""
    import torch
    from scipy import stats
    from torch import nn

    from sde_core.stats.hsic import kernel_spread, resolve_sigma, split_half_hsic_batch

    sp = job.spec
    seed, n, dim, bs = sp["seed"], sp["n_points"], sp["dim"], sp["batch_size"]
    rng = np.random.default_rng([seed, 0xA4])
    x = rng.standard_normal((n, dim))
    w = rng.standard_normal(dim)
    y = (x @ w / math.sqrt(dim) + sp["noise"] * rng.standard_normal(n) > 0).astype(np.int64)
    perm = rng.permutation(n)
    batches = [perm[i : i + bs] for i in range(0, n, bs)]
    full = [b for b in batches if len(b) == bs]
    same = np.stack([full[i] for i in rng.choice(len(full), sp["n_subsets"], replace=False)])
    cross = np.stack(
        [
            np.array([full[b][rng.integers(bs)] for b in rng.choice(len(full), bs, replace=False)])
            for _ in range(sp["n_subsets"])
        ]
    )
    subsets = np.concatenate([same, cross])

    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(dim, sp["hidden"]), nn.ReLU(), nn.Linear(sp["hidden"], 2))
    opt = (
        torch.optim.Adam(model.parameters(), lr=sp["lr"])
        if sp["optimizer"] == "adam"
        else torch.optim.SGD(model.parameters(), lr=sp["lr"], momentum=0.9)
    )
    xt, yt = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y)
    order_gen = np.random.default_rng([seed, 0xB7])
    steps_rows: list[dict[str, Any]] = []
    subset_rows: list[dict[str, Any]] = []
    keep = {k: job.labels[k] for k in ("plan", "variant")}

    def layer_acts(layer: str) -> np.ndarray:
        with torch.no_grad():
            hidden = model[1](model[0](xt))
            logits = model[2](hidden)
        out = {"hidden": hidden, "logits": logits, "output": torch.softmax(logits, 1)}[layer]
        return out.double().numpy()

    def measure(step: int, epoch: int, loss: float) -> None:
        with torch.no_grad():
            acc = float((model(xt).argmax(1) == yt).float().mean()) * 100
        for layer in sp["layers"]:
            a = layer_acts(layer)
            sigma = resolve_sigma(sp["sigma"], a[subsets.ravel()])
            h = split_half_hsic_batch(a, subsets, n_splits=sp["splits"], sigma=sigma, seed=seed)
            spread = kernel_spread(a, subsets, sigma)
            scores = h.mean(axis=1)
            k = sp["n_subsets"]
            for i, (score, spr) in enumerate(zip(scores, spread, strict=True)):
                subset_rows.append(
                    {
                        **keep,
                        "seed": seed,
                        "layer": layer,
                        "step": step,
                        "kind": "same" if i < k else "cross",
                        "subset": i % k,
                        "score": float(score),
                        "spread": float(spr),
                    }
                )
            p_sub = stats.mannwhitneyu(scores[:k], scores[k:], alternative="greater").pvalue
            p_split = stats.mannwhitneyu(h[:k].ravel(), h[k:].ravel(), alternative="greater").pvalue
            steps_rows.append(
                {
                    **keep,
                    "seed": seed,
                    "layer": layer,
                    "step": step,
                    "epoch": epoch,
                    "same_mean": float(scores[:k].mean()),
                    "cross_mean": float(scores[k:].mean()),
                    "same_sd": float(scores[:k].std(ddof=1)),
                    "cross_sd": float(scores[k:].std(ddof=1)),
                    "p_subset": float(p_sub),
                    "p_split": float(p_split),
                    "train_acc": acc,
                    "loss": loss,
                    "sigma": float(sigma),
                }
            )

    wanted = set(sp["eval_steps"])
    step, loss = 0, float("nan")
    if 0 in wanted:
        measure(0, 0, loss)
    for epoch in range(1, sp["epochs"] + 1):
        model.train()
        for b in order_gen.permutation(len(batches)):
            idx = torch.as_tensor(batches[b])
            opt.zero_grad()
            out = nn.functional.cross_entropy(model(xt[idx]), yt[idx])
            out.backward()
            opt.step()
            step += 1
            loss = float(out.detach())
            if step in wanted:
                model.eval()
                measure(step, epoch, loss)
                model.train()
    return JobResult(tables={"toy_steps": steps_rows, "toy_subsets": subset_rows})


def run_job(job: PlanJob, ctx: JobContext, deps: Mapping[str, PlanJob]) -> JobResult:
    """Execute one job. A pure function of the job, the artefacts of its dependencies (found
    from their specs under ``ctx.work``) and the context; it writes only its own artefact folder
    and the shared activation cache, never the results store.

    Raises:
        PlanError: a dependency's artefact is missing. Other :class:`~sde_core.errors.SDEError` s
            from the library (data, training, settings) pass through.
    """
    if job.kind == "train":
        return _run_train(job, ctx)
    if job.kind == "toy":
        return _run_toy(job, ctx)
    if job.kind == "workspace":
        from sde_core.pipeline.plans.workspace_study import run_workspace_job

        return run_workspace_job(job, ctx)
    (source,) = (deps[k] for k in job.deps)
    if job.kind == "unlearn":
        return _run_unlearn(job, ctx, source)
    if job.kind == "evaluate":
        return _run_evaluate(job, ctx, source)
    raise PlanError(f"job {job.key}: unknown kind {job.kind!r}")
