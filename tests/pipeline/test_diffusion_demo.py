"""The diffusion demo (method §14): its builder on tiny synthetic Fashion-MNIST idx files, the
Figure 6 plan, its figures, and every dashboard page on the shipped demo."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from idx_files import write_idx
from streamlit.testing.v1 import AppTest

from sde_core.cli import main
from sde_core.pipeline.demo_diffusion import (
    DIFFUSION_MODELS,
    SWEEP_FILE,
    build_diffusion_demo,
    default_diffusion_folder,
    diffusion_recipe,
)
from sde_core.pipeline.diffusion_memorisation import COPIES_FILE, LOSS_FILE
from sde_core.pipeline.settings import ALGORITHM_VERSION, NOISE_LEVELS, EvalSettings
from sde_core.pipeline.store import ResultsStore
from sde_core.pipeline.workspace_checks import validate_workspace
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.viz.figures.sweeps import plan_figure

ROOT = Path(__file__).resolve().parents[2]
SMALL = EvalSettings(layer="denoised@0.5", subset_size=8, targets=2, splits=10, panel_size=20,
                     null_pairs=1, baseline_targets=0, draws=1, precision=0)  # fmt: skip

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Fashion-MNIST idx files (80 train / 60 test random images) as Debian ships them."""
    root = tmp_path_factory.mktemp("fashion")
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 80), ("t10k", 60)):
        write_idx(root / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28)))
        write_idx(root / f"{prefix}-labels-idx1-ubyte.gz", np.arange(n) % 10)
    return root


@pytest.mark.slow  # builds a demo
def test_tiny_diffusion_build(source, tmp_path):
    recipe = diffusion_recipe(train_size=60, test_size=50, epochs=1, method_epochs=1,
                              subset_size=8, channels=(4, 8))  # fmt: skip
    recipe = dataclasses.replace(recipe, defaults=SMALL)
    report, rows = build_diffusion_demo(
        recipe, tmp_path / "ws", source=source, sweep_levels=(0.5,), sweep_factors=(1.0,),
        copy_samples=6,
    )  # fmt: skip
    assert report.built == list(DIFFUSION_MODELS)
    ws = load_workspace(report.folder)
    assert validate_workspace(ws, check_data=True) == []
    assert {m.arch for m in ws.models} == {"edm_unet"}
    assert [m.role for m in ws.models] == ["original", "retrained", *["unlearned"] * 3, "random"]
    assert ws.dataset["options"]["normalize"] == [[0.5], [0.5]]
    assert len(ws.dataset["options"]["class_names"]) == 10  # Fashion-MNIST's names
    with ResultsStore(report.store) as store:
        models = store.rows(int(store.list_runs()["id"].iloc[0]), "models")
    assert list(models["name"]) == list(DIFFUSION_MODELS)
    assert models["acc_te"].isna().all() and models["asr"].isna().all()  # no classes
    assert (models["layer"] == "denoised@0.5").all()
    losses = json.loads((report.folder / LOSS_FILE).read_text())["rows"]
    assert len(losses) == len(rows) == len(DIFFUSION_MODELS) * len(NOISE_LEVELS)
    first = losses[0]
    assert first["gap"] == pytest.approx(
        (first["test"] - first["forget"]) / first["test"], rel=1e-9
    )
    for row in rows:  # paired with the retrained model, image by image
        assert (row.paired_forget == 0.0) == (row.model == "retrained")
        assert (row.paired_forget_se > 0) == (row.model != "retrained")
        assert np.isfinite(row.paired_test)
        assert row.gap_ci[0] <= row.gap <= row.gap_ci[1]  # bootstrap intervals hold the value
        assert row.memorisation == pytest.approx(row.paired_forget - row.paired_test)
        lo, hi = row.memorisation_ci
        assert lo <= hi and (row.model != "retrained" or lo == hi == 0.0)
    copies = json.loads((report.folder / COPIES_FILE).read_text())["rows"]
    assert [c["model"] for c in copies] == [*DIFFUSION_MODELS, "D_te"]
    assert [c["samples"] for c in copies] == [6] * len(DIFFUSION_MODELS) + [50]
    for c in copies:  # Wilson's interval holds the share (up to rounding at 0 and 1)
        lo, hi = c["share_ci"]
        assert 0 <= lo <= c["share"] + 1e-12 and c["share"] - 1e-12 <= hi <= 1
    sweep = pd.read_csv(report.folder / SWEEP_FILE)
    assert list(sweep["sigma_rule"]) == ["sqrt_dim", "sqrt_dim", "median", "median"]
    assert sweep.loc[0, "sigma"] == pytest.approx(28.0)  # √784
    assert set(sweep["model"]) == {"original", "retrained"}
    assert {"f1_raw", "null_split_fpr"} <= set(sweep.columns)  # before the gate, null rates
    assert sweep["algorithm"].eq(ALGORITHM_VERSION).all()
    again, _ = build_diffusion_demo(recipe, report.folder, source=source, store=False,
                                    sweeps=False)  # fmt: skip
    assert again.skipped == list(DIFFUSION_MODELS)
    # the project's own `train` and `unlearn` commands train and unlearn a denoiser
    folder = str(report.folder)
    assert main(["train", folder, "--name", "cli", "--arch", "edm_unet", "--arch-kwarg",
                 "channels=[4, 8]", "--optimizer", "adam", "--lr", "1e-3", "--epochs", "1",
                 "--checkpoint-fractions", "1.0"]) == 0  # fmt: skip
    assert main(["unlearn", folder, "--method", "ga", "--name", "cli_ga", "--original", "cli",
                 "--param", "epochs=1"]) == 0  # fmt: skip
    assert main(["unlearn", folder, "--method", "rl", "--name", "cli_rl"]) == 1
    roles = {m.name: (m.role, m.arch) for m in load_workspace(folder, validate=False).models}
    assert roles["cli"] == ("original", "edm_unet") and roles["cli_ga"][0] == "unlearned"


def test_the_diffusion_demos_are_rows_of_one_table():
    from sde_core.errors import SettingsError
    from sde_core.pipeline.demo_diffusion import DIFFUSION_DEMOS, GPU_VARIANTS
    from sde_core.pipeline.demos import DEMOS

    for name, spec in DIFFUSION_DEMOS.items():
        assert DEMOS[name].folder == spec.folder
        assert default_diffusion_folder(name).name == spec.folder
    mem = diffusion_recipe("fashion-mnist-edm-mem")
    assert mem.image_size == 16 and mem.arch_kwargs["image_size"] == 16
    assert mem.train.augmentation == "none" and mem.defaults.subset_size == 50
    assert "area-averaged to 16×16" in mem.description
    old = diffusion_recipe()
    assert old.image_size is None and "image_size" not in old.arch_kwargs
    gpu = diffusion_recipe("fashion-mnist-edm-mem", gpu=True)
    assert gpu.train.device == "cuda" and gpu.train.epochs == GPU_VARIANTS[
        "fashion-mnist-edm-mem"]["epochs"] and gpu.image_size is None  # fmt: skip
    with pytest.raises(SettingsError, match="no GPU variant"):
        diffusion_recipe("fashion-mnist-edm", gpu=True)
    assert diffusion_recipe(method_epochs=3).method_params["ga"]["epochs"] == 3


def test_area_resize_averages_exactly():
    from sde_core.pipeline.demo_data import area_resize

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (3, 28, 28)).astype(np.uint8)
    halves = images.reshape(3, 14, 2, 14, 2).astype(float).mean((2, 4))
    assert np.array_equal(area_resize(images, 14), np.rint(halves).astype(np.uint8))
    flat = np.full((2, 28, 28), 77, dtype=np.uint8)
    assert (area_resize(flat, 16) == 77).all()  # a constant image stays constant
    small = area_resize(images, 16)
    assert small.shape == (3, 16, 16) and small.dtype == np.uint8
    assert abs(small.astype(float).mean() - images.mean()) < 0.6  # area-weighted: mean kept
    from sde_core.errors import SettingsError

    with pytest.raises(SettingsError, match="image_size"):
        area_resize(images, 40)


def test_diffusion_demo_bad_source_is_one_error_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    argv = ["demo", "build", "--dataset", "fashion-mnist-edm", "--out", str(tmp_path / "ws"),
            "--source", str(tmp_path / "empty")]  # fmt: skip
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and "dataset-fashion-mnist" in err[0]


def test_fig6_plan_runs_on_denoisers_and_plots_both_axes(source, tmp_path):
    from sde_core.pipeline.plans.driver import run_plan
    from sde_core.pipeline.plans.spec import load_plan

    overrides = [f"dataset.root={source}", "dataset.train_size=60", "dataset.test_size=50",
                 "params.seeds=[0]", "params.subset_sizes=[8]", "device=cpu",
                 'params.layers=["denoised@0.5", "denoised@2"]',
                 'params.sigmas=["sqrt_dim", "median"]', "train.epochs=1",
                 "model.kwargs.channels=[4, 8]", "eval.splits=10", "eval.targets=4"]  # fmt: skip
    with ResultsStore(tmp_path / "plan.sqlite") as store:
        variant = load_plan("fig6_diffusion").variant("default", overrides)
        report = run_plan(variant, tmp_path / "work", store, progress=False)
        points = store.rows(report.run_id, "points")
    assert len(points) == 4 and points["acc_te"].isna().all()
    assert sorted(points["value"]) == ["median", "median", "sqrt_dim", "sqrt_dim"]
    figure = plan_figure(points, "f1")
    names = [t.name for t in figure.data]
    assert any(n.startswith("√d rule: σ = 28") for n in names)
    assert sum(n.startswith("median rule") for n in names) == 2  # one per noise level
    by_level = plan_figure(points, "f1", by_layer=True)
    assert list(by_level.data[0].x) == ["denoised@0.5", "denoised@2"]


# ------------------------------------------------------------------ the shipped diffusion demo


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory):
    """A copy of assets/demo-fashion-edm, opened by the app."""
    folder = tmp_path_factory.mktemp("edm") / "demo-fashion-edm"
    skip = shutil.ignore_patterns(".sde-cache", "*.sqlite-wal", "*.sqlite-shm")
    shutil.copytree(default_diffusion_folder(), folder, ignore=skip)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SDE_WORKSPACE", str(folder))
        mp.setenv("SDE_DATA_ROOTS", str(folder.parent))
        yield folder


def _page(page: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.switch_page(f"pages/{page}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_shipped_diffusion_demo_is_complete(shipped):
    ws = load_workspace(shipped)
    assert validate_workspace(ws, check_data=True) == []
    assert [m.name for m in ws.models] == list(DIFFUSION_MODELS)
    assert ws.defaults.layer == "denoised@0.5"
    for name in ("results.sqlite", LOSS_FILE, SWEEP_FILE, "LICENSE-data.txt"):
        assert (shipped / name).is_file(), name


@pytest.mark.parametrize(
    "page",
    # Explore takes ~15 s on 2 cores: it runs with the slow tests (make test-slow, CI)
    [pytest.param("explore", marks=pytest.mark.slow), "compare", "report", "workspace", "method"],
)
def test_every_page_works_on_the_shipped_diffusion_demo(shipped, page):
    at = _page(page)
    if page == "explore":  # clean, noisy and denoised images of a target subset
        model = at.selectbox(key="w_x_model").value
        # the retrained model's denoising of the same noisy inputs beside another model's
        strips = 3 if model == "retrained" else 4
        assert len(at.get("image")) == strips, model
        captions = " ".join(c.value for c in at.caption)
        assert model == "retrained" or "Denoised by retrained, the retrained model" in captions
        # and, once its section is open, the gallery of the most remembered forget images
        at.session_state["x_samples_open"] = True
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert len(at.get("image")) == strips + 1, model
        assert at.selectbox(key="w_s_layer").value == "denoised@0.5"


@pytest.mark.slow  # 30 s on 2 cores, the quick suite's slowest test: it runs a sweep
def test_sweeps_page_runs_a_noise_level_sweep_on_the_diffusion_demo(shipped):
    at = _page("sweeps")
    at.radio(key="sw_param").set_value("layer").run()
    assert at.multiselect(key="sw_layers").value == [f"denoised@{v:g}" for v in NOISE_LEVELS]
    at.multiselect(key="sw_layers").set_value(["denoised@0.5"]).run()
    at.multiselect(key="sw_models_False").set_value(["retrained"]).run()
    at.button(key="sw_run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.get("plotly_chart")) >= 2
