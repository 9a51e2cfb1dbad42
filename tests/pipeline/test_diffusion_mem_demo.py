"""The shipped memorising diffusion demo (method §14, ``assets/demo-fashion-edm-mem``): its
files, its memorisation measures and the tables the docs quote, read from the shipped files
(fast: nothing is trained or evaluated)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.scripts import load_script

from sde_core.pipeline.demo_diffusion import (
    DIFFUSION_DEMOS,
    DIFFUSION_MODELS,
    SWEEP_FILE,
    default_diffusion_folder,
    diffusion_recipe,
)
from sde_core.pipeline.diffusion_memorisation import COPIES_FILE, LOSS_FILE, memorisation_markdown
from sde_core.pipeline.evaluation.behaviour import stored_behaviour, with_behaviour
from sde_core.pipeline.evaluation.metric_table import F1
from sde_core.pipeline.settings import ALGORITHM_VERSION, NOISE_LEVELS
from sde_core.pipeline.store import ResultsStore
from sde_core.pipeline.sweeps import paired_columns
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.viz.verdicts.labels import verdict_label

ROOT = Path(__file__).resolve().parents[2]
NAME = "fashion-mnist-edm-mem"
FOLDER = default_diffusion_folder(NAME)


def test_shipped_memorising_demo_has_every_file_and_model():
    ws = load_workspace(FOLDER)
    assert [m.name for m in ws.models] == list(DIFFUSION_MODELS)
    assert {m.arch for m in ws.models} == {"edm_unet"}
    assert ws.original().arch_kwargs["image_size"] == 16
    recipe = diffusion_recipe(NAME)
    assert ws.defaults == recipe.defaults and ws.description == recipe.description
    with np.load(FOLDER / "data.npz") as data:
        assert data["x_train"].shape == (300, 16, 16) and data["x_test"].shape == (500, 16, 16)
    assert np.load(FOLDER / "forget.npy").size == 100
    for name in ("results.sqlite", LOSS_FILE, COPIES_FILE, SWEEP_FILE, "LICENSE-data.txt"):
        assert (FOLDER / name).is_file(), name
    with ResultsStore(FOLDER / "results.sqlite", read_only=True) as store:
        runs = store.list_runs()
        assert len(runs) == 1 and runs["status"].iloc[0] == "complete"
        assert json.loads(runs["settings"].iloc[0])["algorithm"] == ALGORITHM_VERSION
        models = store.rows(int(runs["id"].iloc[0]), "models")
    assert list(models["name"]) == list(DIFFUSION_MODELS)


def test_shipped_memorisation_measures_are_complete_and_consistent():
    rows = json.loads((FOLDER / LOSS_FILE).read_text())["rows"]
    assert len(rows) == len(DIFFUSION_MODELS) * len(NOISE_LEVELS)
    for r in rows:
        assert r["gap_ci"][0] <= r["gap"] <= r["gap_ci"][1], r
        assert r["memorisation"] == r["paired_forget"] - r["paired_test"]
    copies = {c["model"]: c for c in json.loads((FOLDER / COPIES_FILE).read_text())["rows"]}
    assert list(copies) == [*DIFFUSION_MODELS, "D_te"]
    assert copies["D_te"]["samples"] == 500 and copies["original"]["samples"] == 300
    for c in copies.values():
        assert c["copies"] == round(c["share"] * c["samples"])
        assert (
            c["share_forget"] + c["share_retain"] == c["share"]
            or abs(c["share_forget"] + c["share_retain"] - c["share"]) < 1e-12
        )
    # the retrained model never saw D_f: it cannot copy a D_f image more than chance allows
    assert copies["retrained"]["share_forget"] <= copies["D_te"]["share"] + 0.02


def test_shipped_fig6_sweep_is_at_the_current_algorithm_version():
    sweep = pd.read_csv(FOLDER / SWEEP_FILE)
    assert set(sweep["model"]) == {"original", "retrained"}
    assert sorted(sweep["noise_level"].unique()) == list(NOISE_LEVELS)
    assert len(sweep) == 2 * len(NOISE_LEVELS) * 8  # 7 multiples of √d and the median rule
    assert sweep.loc[sweep["sigma_rule"] == "sqrt_dim", "sigma"].eq(16.0).all()  # √256
    assert sweep["algorithm"].eq(ALGORITHM_VERSION).all()


def test_shipped_fig6_sweep_pairs_every_sigma_with_sqrt_d():
    """Each σ's paired F1 difference from √d at its level: on draws both points ran in full
    (every point here ran the budget's B), the pooled difference is the difference of the two
    pooled F1s — checked to the CSV's six digits; the interval for all σ at once contains the
    one for σ alone; nothing is compared at √d itself or where the gate withholds F1."""
    value, lo, hi, all_lo, all_hi = paired_columns(F1.key)
    sweep = pd.read_csv(FOLDER / SWEEP_FILE)
    assert sweep["paired_base"].eq(16.0).all()
    compared = 0
    for _, level in sweep.groupby(["noise_level", "model"]):
        base = level[level["sigma_rule"] == "sqrt_dim"].iloc[0]
        assert level.loc[level["sigma_rule"] == "sqrt_dim", [value, lo, hi]].isna().all().all()
        others = level[(level["sigma_rule"] != "sqrt_dim") & level[F1.key].notna()]
        if pd.isna(base[F1.key]):
            assert level[value].isna().all()
            continue
        np.testing.assert_allclose(others[value], others[F1.key] - base[F1.key], atol=5e-6)
        assert (others[all_lo] <= others[lo] + 1e-9).all()
        assert (others[all_hi] >= others[hi] - 1e-9).all()
        assert ((others[lo] <= others[value]) & (others[value] <= others[hi])).all()
        compared += len(others)
    assert compared == 2 * 4 * 7  # σ_t ≤ 1 pass the gate, σ_t = 2 does not


def _layer_study():
    return load_script("reproduction/diffusion_layers.py")


def test_the_layer_study_covers_every_representation_and_matches_the_store():
    """The study of every offered representation (reproduction/diffusion_layers.py): its table
    is its JSON's, it has every layer alias at every noise level, and at the default layer it
    is the shipped store's run (same verdicts and OTRs: the same evaluation, done twice)."""
    study = _layer_study()
    json_path, md_path = study.paths(FOLDER)
    data = json.loads(json_path.read_text(encoding="utf-8"))
    assert md_path.read_text(encoding="utf-8") == study.markdown(data), (
        "run python reproduction/diffusion_layers.py --tables-only"
    )
    ws = load_workspace(FOLDER)
    layers = [row["layer"] for row in data["layers"]]
    assert layers == study.representations(ws)
    assert len(layers) == 5 * len(NOISE_LEVELS)  # denoised and block1-4 at every σ_t
    assert data["algorithm"] == ALGORITHM_VERSION
    default = data["layers"][layers.index(ws.defaults.layer)]["models"]
    with ResultsStore(FOLDER / "results.sqlite", read_only=True) as store:
        run_id = int(store.list_runs()["id"].iloc[0])
        rows = with_behaviour(store.rows(run_id, "models"), stored_behaviour(store, run_id))
    for row in rows.to_dict("records"):
        if row["name"] not in default:
            continue
        assert default[row["name"]]["verdict"] == verdict_label(row), row["name"]
        otr = default[row["name"]]["otr"]
        assert (otr is None and np.isnan(row["otr"])) or otr == pytest.approx(row["otr"])


def test_the_quoted_tables_are_the_shipped_files():
    for spec in DIFFUSION_DEMOS.values():
        folder = ROOT / "assets" / spec.folder
        target = ROOT / "reproduction" / "results" / "diffusion" / f"{spec.folder}.md"
        if (folder / LOSS_FILE).is_file():
            assert target.read_text(encoding="utf-8") == memorisation_markdown(folder), (
                "run python reproduction/diffusion_tables.py"
            )


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory):
    """A copy of assets/demo-fashion-edm-mem, opened by the app."""
    folder = tmp_path_factory.mktemp("edm-mem") / FOLDER.name
    skip = shutil.ignore_patterns(".sde-cache", "*.sqlite-wal", "*.sqlite-shm")
    shutil.copytree(FOLDER, folder, ignore=skip)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SDE_WORKSPACE", str(folder))
        mp.setenv("SDE_DATA_ROOTS", str(folder.parent))
        yield folder


@pytest.mark.parametrize("page", ["explore", "compare"])
def test_the_app_opens_the_memorising_demo(shipped, page):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.switch_page(f"pages/{page}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    if page == "explore":
        assert at.selectbox(key="w_s_layer").value == "denoised@0.5"
        assert len(at.get("image")) >= 3  # clean, noisy and denoised images of 16×16
