"""Experiment plans (method §8): every shipped plan validates, small runs work end to end and
resume without duplicates, the CIFAR-10 ResNet-18 variant runs on a fake CIFAR folder, and bad
plan files raise a PlanError naming the field."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from sde_core.cli import main
from sde_core.errors import PlanError
from sde_core.pipeline.plans.driver import check_layers, preflight, run_plan
from sde_core.pipeline.plans.graph import artifact_dir, build_jobs
from sde_core.pipeline.plans.spec import (
    PLAN_DIR,
    apply_overrides,
    list_plans,
    load_plan,
    parse_override,
)
from sde_core.pipeline.store import ResultsStore

PLANS = list_plans()

# A Table 1 cell small enough for a test: 1,000 mnist1d samples (600 train / 400 test), R = 20%.
SMALL_CELL = [
    "dataset.options.num_samples=1000",
    "params.seeds=[0]",
    "params.forget_ratios=[0.2]",
    "params.subset_sizes=[48]",
    'params.layers=["output"]',
    "train.epochs=4",
    "eval.splits=20",
    "eval.targets=6",
]
SMALL_TOY = [
    "params.seeds=[0]",
    "params.n_points=800",
    "params.batch_size=16",
    "params.epochs=2",
    "params.n_subsets=5",
    "params.eval_steps=[0, 100]",
    "params.splits=10",
]


def test_the_plan_folder_holds_every_protocol():
    names = {p.stem for p in PLANS}
    assert {
        "table1",
        "table3_baselines",
        "table4_methods",
        "fig2_histograms",
        "fig3_sigma",
        "fig4_layer",
        "training_sufficiency",
        "toy_fixed_batch",
    } <= names


@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.stem)
def test_every_plan_file_validates(path: Path):
    plan = load_plan(path)
    assert "default" in plan.variants
    if plan.experiment not in ("toy", "workspace"):  # the paper-scale variant: a ResNet-18 or EDM
        paper_scale = "cifar10-edm" if plan.name == "fig6_diffusion" else "cifar10-resnet18"
        assert {"fashion-mnist", paper_scale} <= set(plan.variants)
    for name in plan.variants:
        variant = plan.variant(name)
        check_layers(variant)  # every layer of the plan exists on its architecture
        jobs = build_jobs(variant)
        assert jobs and len({j.key for j in jobs}) == len(jobs)
        for job in jobs:  # dependencies come first
            assert all(
                jobs.index(next(d for d in jobs if d.key == k)) < jobs.index(job) for k in job.deps
            )
        assert variant.notes or (name == "default" and plan.experiment == "toy")


def test_plans_share_models_through_content_addressed_artefacts(tmp_path: Path):
    table1 = build_jobs(load_plan("table1").variant())
    sigma = build_jobs(load_plan("fig3_sigma").variant())
    key = "train/retrained/seed=0/R=0.1"
    a = next(j for j in table1 if j.key == key)
    b = next(j for j in sigma if j.key == key)
    assert artifact_dir(a, tmp_path) == artifact_dir(b, tmp_path)


def test_toy_runs_end_to_end(tmp_path: Path):
    variant = load_plan("toy_fixed_batch").variant("default", SMALL_TOY)
    with ResultsStore(tmp_path / "r.sqlite") as store:
        report = run_plan(variant, tmp_path / "work", store, progress=False)
        steps = store.rows(report.run_id, "toy_steps")
        subsets = store.rows(report.run_id, "toy_subsets")
    assert report.ran == ["toy/seed=0"]
    assert len(steps) == 2 * 2  # two layers x two steps
    assert set(steps["step"]) == {0, 100} and steps["p_subset"].between(0, 1).all()
    assert len(subsets) == 2 * 2 * 2 * 5  # layers x steps x kinds x subsets
    assert (subsets["score"] >= 0).all() and (subsets["spread"] > 0).all()


@pytest.fixture(scope="module")
def small_cell(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, object]:
    """One Table 1 cell run once: (work folder, store path, report)."""
    root = tmp_path_factory.mktemp("cell")
    variant = load_plan("table1").variant("default", SMALL_CELL)
    with ResultsStore(root / "r.sqlite") as store:
        report = run_plan(variant, root / "work", store, progress=False)
    return root / "work", root / "r.sqlite", report


def test_a_table1_cell_runs_end_to_end(small_cell):
    _, store_path, report = small_cell
    assert report.ran == [
        "train/retrained/seed=0/R=0.2",
        "eval/R=0.2/seed=0/ckpt=0.8/layer=output/sigma=sqrt_dim/n=48",
    ]
    with ResultsStore(store_path) as store:
        run = store.get_run(report.run_id)
        points = store.rows(run.id, "points")
        models = store.rows(run.id, "models")
    assert run.label == "plan table1 [default]" and run.workspace_hash.startswith("plan:")
    assert run.settings["variant"] == "default" and run.status == "complete"
    row = points.iloc[0]
    assert (row["plan"], row["param"], row["value"], row["x"]) == (
        "table1",
        "subset_size",
        "48",
        48.0,
    )
    assert row["model"] == "retrained" and row["forget_ratio"] == 0.2 and row["checkpoint"] == 0.8
    assert 0 <= row["f1_raw"] <= 1 and row["sigma"] == pytest.approx(np.sqrt(10))
    # the gate (method §12) withholds F1 exactly when it gives a reason
    assert np.isnan(row["f1"]) == bool(row["inconclusive_reason"])
    assert 0 <= row["acc_r"] <= 100 and np.isnan(row["asr"])
    assert {"score_spread_corr", "null_split_fpr", "calibrated_f1"} <= set(points.columns)
    assert models.iloc[0]["epochs"] == 4 and not models.iloc[0]["reused"]


def test_a_second_run_skips_finished_units_without_duplicates(small_cell):
    work, store_path, first = small_cell
    variant = load_plan("table1").variant("default", SMALL_CELL)
    with ResultsStore(store_path) as store:
        again = run_plan(variant, work, store, progress=False)
        assert again.run_id == first.run_id
        assert again.ran == [] and len(again.skipped) == 2
        assert len(store.rows(again.run_id, "points")) == 1
        assert len(store.rows(again.run_id, "models")) == 1
        assert len(store.finished_units(again.run_id)) == 2


def test_a_new_store_reuses_the_trained_model(small_cell, tmp_path: Path):
    work, _, _ = small_cell
    variant = load_plan("table1").variant("default", SMALL_CELL)
    with ResultsStore(tmp_path / "other.sqlite") as store:
        report = run_plan(variant, work, store, progress=False)
        models = store.rows(report.run_id, "models")
    assert len(report.ran) == 2 and bool(models.iloc[0]["reused"])


def _write_fake_cifar10(root: Path, n_per_batch: int = 40, n_test: int = 60) -> Path:
    """CIFAR-10 python batches with random images (5 x n_per_batch train, n_test test)."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name, n in [(f"data_batch_{i}", n_per_batch) for i in range(1, 6)] + [
        ("test_batch", n_test)
    ]:
        batch = {
            b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
            b"labels": (np.arange(n) % 10).tolist(),
        }
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    names = [f"class{i}".encode() for i in range(10)]
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": names}, protocol=2))
    return root


@pytest.mark.slow  # trains a ResNet-18
def test_cifar10_resnet18_variant_on_a_fake_cifar_folder(tmp_path: Path):
    root = _write_fake_cifar10(tmp_path / "cifar")
    overrides = [
        f"dataset.root={root}",
        "device=cpu",
        "train.epochs=1",
        "train.batch_size=100",
        "params.seeds=[0]",
        "params.forget_ratios=[0.2]",
        "params.subset_sizes=[8]",
        'params.layers=["block4"]',
        "eval.splits=10",
        "eval.targets=4",
    ]
    variant = load_plan("table1").variant("cifar10-resnet18", overrides)
    assert variant.setup is not None and variant.setup.arch == "resnet18"
    with ResultsStore(tmp_path / "r.sqlite") as store:
        report = run_plan(variant, tmp_path / "work", store, progress=False)
        points = store.rows(report.run_id, "points")
    assert report.data_sizes == {"train": 200, "test": 60}
    assert len(points) == 1 and points.iloc[0]["dim"] == 512 and points.iloc[0]["layer"] == "block4"


# ---------------------------------------------------------------------------------------------
# Bad plans
# ---------------------------------------------------------------------------------------------

GOOD = """
name = "p"
experiment = "retrained"
sweep = "subset_size"
[params]
seeds = [0]
forget_ratios = [0.2]
subset_sizes = [48]
[variants.default]
dataset = { kind = "mnist1d", root = "data/mnist1d" }
model = { arch = "mlp" }
train = { epochs = 2, checkpoint_fractions = [0.5, 1.0] }
"""


def _plan(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(text)
    return path


def test_a_minimal_plan_is_valid(tmp_path: Path):
    variant = load_plan(_plan(tmp_path, GOOD)).variant()
    assert variant.params.checkpoints == (1.0,) and variant.params.layers == ("penultimate",)


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ('sweep = "subset_size"', 'sweep = "subset_size"\ncolour = "red"', "colour"),
        ('experiment = "retrained"', 'experiment = "magic"', "experiment"),
        ('sweep = "subset_size"', 'sweep = "method"', "sweep"),
        ("[variants.default]", "[variants.gpu]", "variants"),
        ("subset_sizes = [48]", 'subset_sizes = "48"', "params.subset_sizes"),
        ("subset_sizes = [48]", "subset_sizes = [2]", r"params.subset_sizes\[0\]"),
        ("forget_ratios = [0.2]", "forget_ratios = [1.5]", r"params.forget_ratios\[0\]"),
        ("seeds = [0]", "seeds = [0]\nsigmas = ['wide']", r"params.sigmas\[0\]"),
        ("seeds = [0]", "seeds = [0]\ncheckpoints = [0.3]", "params.checkpoints"),
        ("seeds = [0]", "seeds = [0]\nlayer = 'output'", "params.layer"),
        ("seeds = [0]\n", "", "params.seeds"),
        ("[params]", "[eval]\nlayer = 'output'\n[params]", "eval.layer"),
        ("[params]", "[eval]\nsplits = 1\n[params]", "eval"),
        ('arch = "mlp"', 'arch = "transformer9000"', "model.arch"),
        ("epochs = 2,", "epochs = 2, seed = 3,", "train.seed"),
        ("epochs = 2,", "epochs = 0,", "train"),
        ('kind = "mnist1d"', 'kind = "imagenet"', "dataset"),
        ("[variants.default]", 'device = "tpu"\n[variants.default]', "device"),
    ],
)
def test_bad_plan_files_name_the_field(tmp_path: Path, old: str, new: str, field: str):
    assert old in GOOD
    with pytest.raises(PlanError, match=field):
        load_plan(_plan(tmp_path, GOOD.replace(old, new)))


def test_bad_methods_and_histogram_models_name_the_field(tmp_path: Path):
    text = load_plan("table4_methods").path.read_text()
    with pytest.raises(PlanError, match=r"params.methods.magic"):
        load_plan(_plan(tmp_path, text.replace("unroll = {}", "magic = {}")))
    with pytest.raises(PlanError, match=r"params.methods.ft.lrr"):
        load_plan(_plan(tmp_path, text.replace("ft = {}", "ft = { lrr = 1 }")))
    text = load_plan("fig2_histograms").path.read_text()
    with pytest.raises(PlanError, match=r"params.models"):
        load_plan(_plan(tmp_path, text.replace('"random", "retrained"]', '"unlearned"]')))


def test_invalid_toml_and_missing_files(tmp_path: Path):
    with pytest.raises(PlanError, match="not valid TOML"):
        load_plan(_plan(tmp_path, "name = "))
    with pytest.raises(PlanError, match=r"no such plan file.*table1"):
        load_plan(tmp_path / "nope.toml")


def test_overrides_are_dotted_toml_values():
    assert parse_override("params.seeds=[0, 1]") == (["params", "seeds"], [0, 1])
    assert parse_override("dataset.root=/data/cifar") == (["dataset", "root"], "/data/cifar")
    assert apply_overrides({"train": {"epochs": 3}}, ["train.epochs=1"]) == {"train": {"epochs": 1}}
    with pytest.raises(PlanError, match="key=value"):
        parse_override("epochs")
    with pytest.raises(PlanError, match="unknown key 'trian'"):
        apply_overrides({}, ["trian.epochs=1"])
    with pytest.raises(PlanError, match=r"params.seeds\[0\]"):
        load_plan("table1").variant("default", ["params.seeds=[-1]"])
    with pytest.raises(PlanError, match="unknown variant"):
        load_plan("table1").variant("tpu")


def test_preflight_rejects_subsets_larger_than_a_pool_and_unknown_layers(tmp_path: Path):
    plan = load_plan(
        _plan(
            tmp_path,
            GOOD.replace(
                'root = "data/mnist1d"', 'root = "m.npz", options = { num_samples = 200 }'
            ),
        )
    )
    with pytest.raises(PlanError, match=r"params.subset_sizes: n = 48 exceeds a pool"):
        preflight(plan.variant("default", ["params.subset_sizes=[48]"]), tmp_path)
    with pytest.raises(PlanError, match=r"params.layers"):
        preflight(plan.variant("default", ['params.layers=["conv9"]']), tmp_path)


def test_cli_dry_run_and_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path):
    assert main(["run-plan", "table1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "105 jobs" in out and "note:" in out
    assert main(["run-plan", str(PLAN_DIR / "table1.toml"), "--list-variants"]) == 0
    assert "cifar10-resnet18" in capsys.readouterr().out
    assert main(["run-plan", "table1", "--override", "params.subset_sizes=[x]", "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "params.subset_sizes" in err and err[-1] == "\n"
