"""Sweeps on a tiny real workspace: mnist1d, a small MLP trained with checkpoints, its retrained
copy and a random initialisation."""

from __future__ import annotations

# Float tolerances in this file compare two float64 computations of the same inputs in one
# process (an implementation against a textbook or a second route): no float32 activation or
# machine-specific kernel lies between them, so their agreement is limited only by float64
# summation order and a tight relative tolerance is the conditioning. Results that cross
# machines are compared by sde_core.pipeline.reproduce (docs/method.md §13).
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.designs import fixed_settings
from torch.utils.data import Subset

import sde_core.inputs.activations as activations
from sde_core.errors import SettingsError
from sde_core.inputs.architectures import build_model
from sde_core.inputs.data import DatasetSpec, load_dataset
from sde_core.inputs.indices import save_index_file
from sde_core.inputs.models import save_checkpoint
from sde_core.learning.training import TrainConfig, train
from sde_core.pipeline.evaluation.plan import draw_subsets
from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
from sde_core.pipeline.store import ResultsStore
from sde_core.pipeline.sweeps import (
    PAIRED_METRICS,
    SWEEP_COLUMNS,
    available_fractions,
    checkpoint_workspace,
    default_paired_base,
    interval_side,
    paired_columns,
    run_sweep,
    sigma_markers,
    sweep_forecast,
)
from sde_core.pipeline.workspace import CheckpointRef, ModelEntry, Workspace, workspace_hash
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.pipeline.workspace_write import relative_to_workspace, write_workspace
from sde_core.viz.figures.sweeps import sweep_figure

MLP = {"input_dim": 40, "hidden": [128, 128], "num_classes": 10}
SETTINGS = fixed_settings(
    subset_size=40, targets=10, splits=20, panel_size=20, null_pairs=5, baseline_targets=0
)
MODELS = ["original", "retrain", "random"]


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """One torch thread: weights independent of the core count, and far less CPU time when the
    machine's cores are busy (measured: 2.6 s vs 29 s to build the workspace)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """1200 train / 800 test mnist1d rows, |D_f| = 300; an MLP overfit for 40 epochs (train 100%,
    test ≈ 48%) with checkpoints at 10–80%, its copy retrained on D_r, a random initialisation."""
    root = tmp_path_factory.mktemp("tiny-ws")
    dataset = {
        "kind": "mnist1d",
        "root": "data/mnist1d.npz",
        "options": {"num_samples": 2000, "train_split": 0.6},
    }
    bundle = load_dataset(DatasetSpec.from_dict(dataset, base_dir=root))
    n_train = len(bundle.train)
    forget = np.random.default_rng(0).choice(n_train, n_train // 4, replace=False)
    save_index_file(root / "forget.npy", forget)
    ws = Workspace(root.resolve(), dataset, "forget.npy", name="tiny")
    write_workspace(ws)
    config = TrainConfig(optimizer="adam", lr=2e-3, weight_decay=0.0, epochs=40, batch_size=64)
    retain = np.setdiff1d(np.arange(n_train), forget)

    def rel(path: Path) -> str:
        return relative_to_workspace(ws, path)

    torch.manual_seed(0)  # the initial weights must not depend on which tests ran before
    original = train(
        build_model("mlp", **MLP), bundle.train, config, root / "models/original", arch="mlp"
    )
    ws.add_model(
        ModelEntry(
            "original",
            "original",
            "mlp",
            rel(original.final_path),
            method="train",
            init_checkpoint=rel(original.init_path),
            checkpoints=[
                CheckpointRef(f, rel(p)) for f, p in sorted(original.checkpoints.items()) if f < 1
            ],
        )
    )
    torch.manual_seed(2)
    retrained = train(
        build_model("mlp", **MLP),
        Subset(bundle.train, retain.tolist()),
        config,
        root / "models/retrain",
        arch="mlp",
    )
    ws.add_model(
        ModelEntry("retrain", "retrained", "mlp", rel(retrained.final_path), method="retrain")
    )
    torch.manual_seed(1)
    random = save_checkpoint(build_model("mlp", **MLP), root / "models/random.safetensors", "mlp")
    ws.add_model(ModelEntry("random", "random", "mlp", rel(random), method="init"))
    write_workspace(ws)
    return load_workspace(root)


@pytest.fixture
def extractions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the rows of every activation extraction (cache misses) during a test."""
    calls: list[int] = []
    real = activations.extract_activations

    def counting(model, dataset, layers, **kwargs):
        out = real(model, dataset, layers, **kwargs)
        calls.append(len(next(iter(out.values()))))
        return out

    monkeypatch.setattr(activations, "extract_activations", counting)
    return calls


def test_sigma_sweep_rows_and_markers(workspace, tmp_path):
    cache = tmp_path / "cache"
    values = ["sqrt_dim", "median", 0.05, 2.0]
    sweep = run_sweep(workspace, SETTINGS, "sigma", values, cache_dir=cache)
    assert list(sweep.columns) == list(SWEEP_COLUMNS)
    assert len(sweep) == len(values) * len(MODELS)
    assert sweep.groupby("value", sort=False).size().to_dict() == dict.fromkeys(values, 3)
    assert sweep["model"].tolist()[:3] == MODELS
    assert (sweep["param"] == "sigma").all() and not sweep["from_store"].any()
    for name in MODELS:
        marks = sigma_markers(workspace, SETTINGS, name, cache_dir=cache)
        rows = sweep[sweep["model"] == name].set_index("value")
        assert marks["sqrt_dim"] == pytest.approx(np.sqrt(10)) == rows.loc["sqrt_dim", "sigma"]
        assert marks["median"] == pytest.approx(rows.loc["median", "sigma"], rel=1e-12)
        assert rows.loc[0.05, "sigma"] == 0.05 and rows.loc[2.0, "sigma"] == 2.0
    # The same numbers as a plain evaluation at one point.
    direct = evaluate_workspace(workspace, SETTINGS, cache_dir=cache).models
    at_default = sweep[sweep["value"] == "sqrt_dim"]
    np.testing.assert_array_equal(at_default["otr"], direct["otr"])
    np.testing.assert_array_equal(at_default["f1"], direct["f1"])
    # The paper's effect at this tiny scale: the overfit original remembers D_f, the retrained
    # model does not, and the random initialisation cannot tell training from unseen data.
    by_model = at_default.set_index("model")
    assert by_model.loc["original", "references_valid"] and by_model.loc["original", "otr"] <= 0.2
    assert by_model.loc["retrain", "references_valid"] and by_model.loc["retrain", "otr"] >= 0.7
    assert not by_model.loc["random", "references_valid"]
    fig = sweep_figure(sweep[sweep["value"] != "median"], "otr", markers=marks)
    assert {t.name for t in fig.data} >= {"original", "√d rule: σ = 3.16"}


def test_second_sweep_is_served_from_the_store(workspace, tmp_path, extractions):
    cache = tmp_path / "cache"
    with ResultsStore(tmp_path / "results.sqlite") as store:
        first = run_sweep(
            workspace, SETTINGS, "subset_size", [30, 40], store=store, cache_dir=cache
        )
        assert extractions and not first["from_store"].any()
        extracted = len(extractions)
        assert extracted == 2 * len(MODELS)  # train + test once per model: the cache serves n=40
        stages: list[tuple[str, int, int]] = []
        second = run_sweep(
            workspace,
            SETTINGS,
            "subset_size",
            [30, 40],
            store=store,
            cache_dir=cache,
            progress=lambda *a: stages.append(a),
        )
    assert len(extractions) == extracted  # nothing extracted again
    assert second["from_store"].all()
    cols = ["value", "model", "otr", "otr_lo", "f1", "calibrated_otr", "sigma", "reference_p"]
    assert second[cols].equals(first[cols])
    assert [s for s in stages if s[0] == "sweep"] == [
        ("sweep", 0, 2),
        ("sweep", 1, 2),
        ("sweep", 2, 2),
    ]
    assert any(s[0].startswith("subset_size = 40: ") for s in stages)


def test_the_forecast_counts_what_is_stored_and_prices_the_rest(workspace, tmp_path):
    """Before a sweep runs: its (value, model) points, how many the store holds, and the
    stored evaluation time of each model at the base settings for each of the others."""
    cache = tmp_path / "cache"
    bundle = load_dataset(DatasetSpec.from_dict(workspace.dataset, base_dir=workspace.root))
    models, values = ["original", "retrain"], [30, 40]  # SETTINGS has n = 40

    def forecast(store):
        return sweep_forecast(workspace, SETTINGS, "subset_size", values, models, store,
                              data_fingerprint=bundle.fingerprint)  # fmt: skip

    nothing = forecast(None)
    assert (nothing.points, nothing.stored, nothing.seconds) == (4, 0, None)
    assert nothing.sentence() == ("4 of 4 points to evaluate, time unknown (no stored "
                                  "evaluation at these settings)")  # fmt: skip
    with ResultsStore(tmp_path / "results.sqlite") as store:
        base = evaluate_workspace(workspace, SETTINGS, models=models, store=store,
                                  cache_dir=cache).models.set_index("name")  # fmt: skip
        priced = forecast(store)
        assert (priced.points, priced.stored) == (4, 2)  # the n = 40 point is the base run
        expected = base.loc["original", "eval_seconds"] + base.loc["retrain", "eval_seconds"]
        assert priced.seconds == pytest.approx(expected) and priced.seconds > 0
        assert priced.sentence() == f"2 of 4 points to evaluate, forecast ≈ {expected:.0f} s"
        run_sweep(workspace, SETTINGS, "subset_size", values, models=models, store=store,
                  cache_dir=cache)  # fmt: skip
        done = forecast(store)
    assert (done.points, done.stored) == (4, 4)
    assert done.sentence() == "all 4 points stored: read back"


class _Interrupt(Exception):
    pass


def test_interrupted_sweep_resumes_from_the_store(workspace, tmp_path):
    cache = tmp_path / "cache"

    def stop_at_second_point(stage: str, done: int, total: int) -> None:
        if stage == "sweep" and done == 1:
            raise _Interrupt

    with ResultsStore(tmp_path / "results.sqlite") as store:
        with pytest.raises(_Interrupt):
            run_sweep(
                workspace,
                SETTINGS,
                "layer",
                ["output", "penultimate"],
                store=store,
                cache_dir=cache,
                progress=stop_at_second_point,
            )
        resumed = run_sweep(
            workspace, SETTINGS, "layer", ["output", "penultimate"], store=store, cache_dir=cache
        )
    assert resumed.groupby("value")["from_store"].all().to_dict() == {
        "output": True,
        "penultimate": False,
    }
    sigma = resumed.groupby("value")["sigma"].first()
    assert sigma["output"] == pytest.approx(np.sqrt(10))
    assert sigma["penultimate"] == pytest.approx(np.sqrt(128))


def test_checkpoint_sweep_evaluates_each_checkpoint(workspace, tmp_path):
    cache = tmp_path / "cache"
    fractions = [0.0, 0.1, 0.4, 1.0]  # 0.0: the initial weights
    with ResultsStore(tmp_path / "results.sqlite") as store:
        sweep = run_sweep(
            workspace, SETTINGS, "checkpoint", fractions, store=store, cache_dir=cache
        )
        runs = store.list_runs()
    assert sweep["model"].tolist() == ["original"] * 4
    assert sweep["value"].tolist() == fractions
    assert len(set(runs["workspace_hash"])) == 4  # stored separately per checkpoint
    assert sweep["reference_p"].nunique() == 4  # each checkpoint evaluated on its own
    assert not sweep["references_valid"].iloc[0]  # untrained weights: nothing to detect
    # ... so its headline numbers are withheld, with the reason (method §12 gate)
    assert np.isnan(sweep["dependence_score"].iloc[0]) and sweep["inconclusive_reason"].iloc[0]
    final = evaluate_workspace(workspace, SETTINGS, models=["original"], cache_dir=cache).models
    assert sweep["otr"].iloc[-1] == final["otr"].iloc[0]
    assert sweep["f1"].iloc[-1] == final["f1"].iloc[0]


def test_checkpoint_workspace_points_at_the_checkpoint(workspace):
    entry = workspace.model("original")
    assert available_fractions(entry) == [0.0, 0.1, 0.2, 0.4, 0.8, 1.0]
    derived = checkpoint_workspace(workspace, 0.2, ["original"])
    assert derived.model("original").checkpoint == "models/original/ckpt_020.safetensors"
    assert derived.model("retrain") == workspace.model("retrain")
    assert workspace.model("original").checkpoint.endswith("ckpt_100.safetensors")  # unchanged
    assert workspace_hash(derived) != workspace_hash(workspace)
    init = checkpoint_workspace(workspace, 0.0, ["original"]).model("original")
    assert init.checkpoint == entry.init_checkpoint


def test_missing_checkpoint_is_a_clear_settings_error(workspace, extractions):
    with pytest.raises(
        SettingsError, match=r"no checkpoint at fraction 0\.3 .*0, 0\.1, 0\.2, 0\.4"
    ):
        run_sweep(workspace, SETTINGS, "checkpoint", [0.1, 0.3])
    with pytest.raises(SettingsError, match=r"'retrain' has no checkpoint at fraction 0\.5.*: 1$"):
        run_sweep(workspace, SETTINGS, "checkpoint", [0.5], models=["retrain"])
    assert not extractions  # validated before anything is evaluated


def test_paired_sigma_sweep_compares_each_point_with_the_base_on_the_same_draws(
    workspace, tmp_path
):
    """Whether a σ beats √d is decided by the paired difference on the draws both points ran:
    every point shares the base's subsets (σ does not change the plan), and each paired column
    is the textbook paired t interval of the per-draw differences, recomputed here."""
    from scipy import stats

    cache = tmp_path / "cache"
    values = ["sqrt_dim", 0.5, 8.0]
    sweep = run_sweep(workspace, SETTINGS, "sigma", values, cache_dir=cache, paired_base="sqrt_dim")
    paired = [c for metric in PAIRED_METRICS for c in paired_columns(metric)]
    assert list(sweep.columns) == [*SWEEP_COLUMNS, "paired_base", *paired]
    assert (sweep["paired_base"] == "sqrt_dim").all()
    assert sweep.loc[sweep["value"] == "sqrt_dim", paired].isna().all().all()
    base = evaluate_workspace(workspace, SETTINGS, cache_dir=cache)
    forget = np.load(workspace.path(workspace.forget_indices))
    base_plan = draw_subsets(1200, 800, forget, SETTINGS)
    checked = 0
    for value in (0.5, 8.0):
        settings = SETTINGS.with_overrides(sigma=value)
        # The pairing's premise: the same subsets in every draw, only σ differs.
        plan = draw_subsets(1200, 800, forget, settings)
        assert len(plan.draws) == len(base_plan.draws) == SETTINGS.draws
        for one, other in zip(plan.draws, base_plan.draws, strict=True):
            for f in dataclasses.fields(one):
                a, b = getattr(one, f.name), getattr(other, f.name)
                pairs = zip(a, b, strict=True) if isinstance(a, tuple) else [(a, b)]
                for x, y in pairs:
                    np.testing.assert_array_equal(x, y)
        point = evaluate_workspace(workspace, settings, cache_dir=cache)
        for name in MODELS:
            row = sweep[(sweep["value"] == value) & (sweep["model"] == name)].iloc[0]
            for metric, trials in (("f1", "controls"), ("otr", "targets")):
                shown, lo, hi, all_lo, all_hi = paired_columns(metric)
                a = point.model_draws(name)
                b = base.model_draws(name)
                withheld = [
                    not np.isfinite(r.models.set_index("name").loc[name, metric])
                    for r in (point, base)
                ]
                if any(withheld):
                    assert row[[shown, lo, hi, all_lo, all_hi]].isna().all()
                    continue
                assert a["draw"].tolist() == b["draw"].tolist()
                d = a[metric].to_numpy() - b[metric].to_numpy()
                w = a[trials].to_numpy(dtype=float)
                w = w / w.sum()
                mean = float(np.sum(w * d))
                k = d.size
                var = k / (k - 1) * float(np.sum((w * (d - mean)) ** 2))
                for x in (a, b):  # the binomial floor of each pooled rate (method §15)
                    m = x[trials].to_numpy(dtype=float)
                    p_ = (float(np.sum(x[metric].to_numpy() * m)) + 2) / (m.sum() + 4)
                    var = max(var, p_ * (1 - p_) / m.sum())
                assert row[shown] == pytest.approx(mean, rel=1e-12, abs=1e-12)
                # alone at 95%; all at once: Bonferroni over the 2 points compared with √d
                for q, (low, high) in ((0.975, (lo, hi)), (1 - 0.025 / 2, (all_lo, all_hi))):
                    half = stats.t.ppf(q, k - 1) * np.sqrt(var)
                    assert row[low] == pytest.approx(max(-1.0, mean - half), rel=1e-9, abs=1e-12)
                    assert row[high] == pytest.approx(min(1.0, mean + half), rel=1e-9, abs=1e-12)
                assert row[all_lo] <= row[lo] and row[all_hi] >= row[hi]
                checked += 1
    assert checked >= 4  # the original and the retrained model pass the gate at these σ


def test_an_interval_decides_a_side_only_when_it_excludes_zero():
    assert interval_side(0.02, 0.23) == "above" and interval_side(-0.3, -0.01) == "below"
    assert interval_side(-0.1, 0.1) is None and interval_side(0.0, 0.2) is None
    assert interval_side(float("nan"), float("nan")) is None  # withheld: nothing decided


def test_the_default_base_is_the_current_setting_when_it_is_swept():
    assert default_paired_base(SETTINGS, "sigma", [0.5, "sqrt_dim"]) == "sqrt_dim"
    assert default_paired_base(SETTINGS, "sigma", [0.5, 2.0]) is None  # √d not among them
    assert default_paired_base(SETTINGS, "layer", ["output", "logits"]) == "output"
    assert default_paired_base(SETTINGS, "checkpoint", [0.5, 1.0]) == 1.0
    assert default_paired_base(SETTINGS, "checkpoint", [0.2, 0.5]) is None
    assert default_paired_base(SETTINGS, "subset_size", [20, 40]) is None  # other subsets


def test_paired_sweep_refuses_a_base_it_cannot_pair(workspace):
    with pytest.raises(SettingsError, match="draw different subsets"):
        run_sweep(workspace, SETTINGS, "subset_size", [20, 40], paired_base=40)
    with pytest.raises(SettingsError, match="not one of the swept sigma values"):
        run_sweep(workspace, SETTINGS, "sigma", [0.5, 2.0], paired_base="sqrt_dim")


@pytest.mark.parametrize(
    ("param", "values", "match"),
    [
        ("bins", [10], "cannot sweep"),
        ("sigma", [], "at least one value"),
        ("sigma", [1.0, 1.0], "repeat"),
        ("sigma", [-1.0], "> 0"),
        ("subset_size", [2], "integer between 4 and 32768"),
        ("checkpoint", ["final"], "fractions"),
    ],
)
def test_invalid_sweeps(workspace, param, values, match):
    with pytest.raises(SettingsError, match=match):
        run_sweep(workspace, SETTINGS, param, values)
