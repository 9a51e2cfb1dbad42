"""The UI-free functions the pages call: target subsets, thumbnails, layer costs, plan runs,
and the view links (settings <-> query parameters)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers.designs import fixed_settings

from sde_core.errors import SettingsError, StoreError
from sde_core.inputs.data import load_dataset
from sde_core.inputs.indices import load_index_file
from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.store import ResultsStore, workspace_store_path
from sde_core.pipeline.workspace import workspace_hash
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.services.evaluation import (
    Throughput,
    activation_cache,
    layer_costs,
    measure_throughput,
    target_subsets,
    thumbnails,
)
from sde_core.services.plans import plan_points, plan_runs
from sde_core.services.view_state import (
    ExploreView,
    decode,
    decode_list,
    encode,
    encode_list,
    view_link,
)


@pytest.fixture(scope="module")
def tiny(tiny_workspace: Path):
    folder = tiny_workspace
    ws = load_workspace(folder)
    bundle = load_dataset(ws.dataset_spec())
    settings = EvalSettings.from_mapping(dataclasses.asdict(ws.defaults))
    return ws, bundle, settings


def test_target_subsets_are_the_evaluations_forget_set_draws(tiny):
    ws, bundle, settings = tiny
    targets = target_subsets(ws, bundle, settings)
    forget = set(load_index_file(ws.path(ws.forget_indices), len(bundle.train)).tolist())
    assert targets.shape == (settings.targets, settings.subset_size)
    assert all(len(set(row)) == settings.subset_size and set(row) <= forget for row in targets)
    np.testing.assert_array_equal(targets, target_subsets(ws, bundle, settings))
    other = target_subsets(ws, bundle, settings.with_overrides(seed=1))
    assert not np.array_equal(targets, other)


def test_thumbnails_name_the_classes(tiny):
    ws, bundle, settings = tiny
    names = ["T-shirt", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
             "Bag", "Ankle boot"]  # fmt: skip
    named = dataclasses.replace(bundle, class_names=names)
    strip = thumbnails(ws, named, settings, "original", 2, count=8)
    assert strip is not None and strip.target == 2 and strip.images.shape[0] == 8
    np.testing.assert_array_equal(strip.indices, target_subsets(ws, bundle, settings)[2][:8])
    labels = bundle.train_labels[strip.indices]
    for caption, right, y in zip(strip.captions, strip.correct, labels, strict=True):
        assert caption.startswith("✓" if right else "✗")
        assert (caption == f"✓ {names[y]}") if right else caption.endswith(f"(is {names[y]})")
    digits = thumbnails(ws, bundle, settings, "original", 2, count=8)
    assert digits is not None and all(c.split()[1].isdigit() for c in digits.captions)
    with pytest.raises(SettingsError, match="does not exist"):
        thumbnails(ws, bundle, settings, "original", settings.targets)


def test_1d_inputs_come_as_signals_with_named_predictions(tmp_path):
    """mnist1d's 40-point inputs are returned as the signals the model sees (drawn as curves)."""
    demo = Path(__file__).resolve().parents[2] / "assets" / "demo-mnist1d"
    skip = shutil.ignore_patterns(".sde-cache", "*.sqlite*")
    ws = load_workspace(shutil.copytree(demo, tmp_path / "demo", ignore=skip))
    bundle = load_dataset(ws.dataset_spec())
    strip = thumbnails(ws, bundle, ws.defaults, "original", 1, count=6)
    assert strip is not None and strip.signal and strip.images.shape == (6, 40)
    train = bundle.split("train")
    np.testing.assert_allclose(strip.images[0], np.asarray(train[int(strip.indices[0])][0]))
    assert all(c.split()[1] in bundle.class_names for c in strip.captions)


def test_layer_costs_follow_the_caches(tiny, tmp_path):
    ws, bundle, settings = tiny
    ws = dataclasses.replace(ws, root=tmp_path)  # a fresh, empty cache folder
    for item in ("data.npz", "forget.npy"):  # copies: the path policy refuses links out
        shutil.copy2(tiny[0].root / item, tmp_path / item)
    shutil.copytree(tiny[0].root / "models", tmp_path / "models")
    ws_hash = workspace_hash(ws, data_fingerprint=bundle.fingerprint)
    rows = len(bundle.train) + len(bundle.test)
    speed = {"mlp": Throughput(rows=1000, seconds=2.0)}
    (cost,) = layer_costs(ws, bundle, settings, ["penultimate"], ws_hash, throughput=speed)
    assert cost.extract == [m.name for m in ws.models] and not cost.ready
    assert cost.rows == 4 * rows and cost.seconds == pytest.approx(4 * rows / 500)
    assert f"extract 4 models × {rows:,} rows, about" in cost.describe()
    # one model evaluated with a store: it is stored at that layer, and its output is cached
    with ResultsStore(workspace_store_path(ws.root)) as store:
        evaluate_workspace(ws, settings.with_overrides(layer="penultimate"), models=["FT"],
                           store=store)  # fmt: skip
    pen, out = layer_costs(ws, bundle, settings, ["penultimate", "output"], ws_hash)
    assert pen.stored == ["FT"] and "FT" not in pen.extract and pen.seconds is None
    assert out.cached == ["FT"] and out.stored == [] and len(out.extract) == 3
    assert activation_cache(ws).root == tmp_path / ".sde-cache" / "activations"
    probe = measure_throughput(ws, bundle, "FT", settings, rows=64)
    assert probe.rows == 64 and probe.rows_per_second > 0


def test_plan_runs_and_points(tmp_path):
    path = tmp_path / "runs.sqlite"
    assert plan_runs(path).empty  # no file yet: nothing, and no file created
    assert not path.exists()
    with ResultsStore(path) as store:
        plan = store.open_run("plan:abc", {"plan": "table1"}, label="plan table1 [default]")
        store.put_unit(plan.id, "job", {"points": [{"model": "m", "f1": 0.9}]})
        other = store.open_run("workspace-hash", {"layer": "output"})
    runs = plan_runs(path)
    assert runs["id"].tolist() == [plan.id] and runs["label"].iloc[0].startswith("plan table1")
    assert plan_points(path, plan.id)["f1"].tolist() == [0.9]
    with pytest.raises(StoreError, match="not an experiment plan"):
        plan_points(path, other.id)


def test_settings_round_trip_through_a_link():
    settings = fixed_settings(layer="penultimate", sigma=0.25, subset_size=300, seed=7, draws=3)
    params = encode(ExploreView(settings=dataclasses.asdict(settings)))
    assert params == {"layer": "penultimate", "sigma": "0.25", "n": "300", "T": "100",
                      "K": "200", "seed": "7", "B": "3", "n0": "10", "Bmax": "60", "bins": "30",
                      "R": "20", "nulls": "20", "Nnull": "1000", "baselines": "20", "alpha": "0.01",
                      "acal": "0.05", "estimator": "biased", "pool": "1"}  # fmt: skip
    view, problems = decode("explore", params)
    assert not problems and settings.with_overrides(**view.settings) == settings
    view, problems = decode(
        "explore", {"sigma": "median", "n": "ten", "K": "-3", "seed": "0", "B": "0"}
    )
    assert view.settings == {"sigma": "median", "seed": 0}
    assert problems == [
        "The link's n=`ten` is not a whole number ≥ 4: kept the current value.",
        "The link's K=`-3` is not a whole number ≥ 2: kept the current value.",
        "The link's B=`0` is not a whole number ≥ 1: kept the current value.",
    ]
    assert decode("explore", {"sigma": "wide"})[1][0].startswith("The link's sigma=`wide` is not")


def test_list_bool_and_links():
    assert decode_list("output, penultimate,,output") == ["output", "penultimate"]
    assert encode_list(["a", "b"]) == "a,b"
    assert decode("explore", {"control": "1"})[0] == ExploreView(control=True)
    assert decode("explore", {"control": "no"})[0] == ExploreView(control=False)
    params = {"model": "FT", "layers": "output,penultimate"}
    assert view_link("http://h:8501/compare", "explore", params, pages=["compare", "explore"]) == (
        "http://h:8501/explore?model=FT&layers=output,penultimate"
    )
    assert view_link("http://h:8501/", "report", {}) == "http://h:8501/report"
    assert view_link(None, "explore", {"model": "a b"}) == "./explore?model=a%20b"
    assert view_link("http://h/app/explore?x=1#f", "explore", {}, pages=["explore"]) == (
        "http://h/app/explore"
    )


def test_links_carry_the_workspace_hash_and_the_public_address():
    from sde_core.services.view_state import hash_matches, link_hash, public_base_url

    digest = "AbC" + "0" * 61
    assert link_hash(digest) == "abc0000000000000" and hash_matches(link_hash(digest), digest)
    assert not hash_matches("abc0000000000001", digest)
    # too short or not hex matches nothing: a damaged link is flagged, never taken as a match
    assert not hash_matches("abc", digest) and not hash_matches("zzzzzzzzzz", digest)
    public = {"SDE_PUBLIC_URL": "https://sde.example.org/app"}
    assert public_base_url("http://127.0.0.1:8501/explore", public) == public["SDE_PUBLIC_URL"]
    assert public_base_url("http://127.0.0.1:8501/x", {"SDE_PUBLIC_URL": "ftp://h"}) == (
        "http://127.0.0.1:8501/x"
    )
    assert public_base_url(None, {}) is None
    shared = view_link(public_base_url(None, public), "explore", {"ws": "assets/demo"})
    assert shared == "https://sde.example.org/app/explore?ws=assets%2Fdemo"


def test_store_path_is_not_spelled_by_services():
    """One place names the cache folder (services.evaluation._cache_root)."""
    root = Path(__file__).resolve().parents[2]
    for path in [*(root / "pages").glob("*.py"), *(root / "sde_core" / "services").glob("*.py")]:
        text = path.read_text(encoding="utf-8")
        if path.name != "evaluation.py":
            assert ".sde-cache" not in text.replace("``<workspace>/.sde-cache``", ""), path


def test_dataset_as_a_small_table(tiny):
    from sde_core.services.audit import data_manifest
    from sde_core.viz.report.tables import dataset_table

    ws, bundle, _ = tiny
    named = dataclasses.replace(bundle, class_names=[f"c{i}" for i in range(10)])
    shown = dataset_table(data_manifest(ws, named)).set_index("item")["value"]
    assert shown["kind"] == "npz" and shown["training rows (D_tr)"] == "600"
    assert shown["test rows (D_te)"] == "400" and shown["classes"].startswith("10: c0, c1")
    assert shown["forget set (D_f)"] == "120 rows from forget.npy"
    assert shown["data fingerprint (SHA-256)"] == bundle.fingerprint
