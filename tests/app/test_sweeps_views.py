"""The Sweeps page's read-only views on copies of the shipped demos: the diffusion demo's
shipped Figure 6 sweep, the mnist1d demo's unlearning curve and the Fashion-MNIST demo's training
curve answer on open, in words first, without computing anything."""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from ui_fixtures import app_test, warm_server

from sde_core.pipeline.evaluation.metric_table import CALIBRATED_OTR

ROOT = Path(__file__).resolve().parents[2]
SKIP = shutil.ignore_patterns(".sde-cache", "*.sqlite-wal", "*.sqlite-shm")


@pytest.fixture(scope="module")
def copies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("sweep-views")
    for demo in ("demo", "demo-fashion-edm", "demo-fashion-edm-mem", "demo-mnist1d"):
        shutil.copytree(ROOT / "assets" / demo, base / demo, ignore=SKIP)
    return base


@pytest.fixture
def opened(copies: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    folder = copies / request.param
    with pytest.MonkeyPatch.context() as mp, warm_server():
        mp.setenv("SDE_WORKSPACE", str(folder))
        mp.setenv("SDE_DATA_ROOTS", str(copies))
        yield folder


def _sweeps_page():
    at = app_test(ROOT / "app.py", 120)
    at.switch_page("pages/sweeps.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _values(data: object) -> list[float]:
    """A plotly JSON array: a list, or a typed array ``{"dtype", "bdata"}`` (base64)."""
    if isinstance(data, dict):
        return np.frombuffer(base64.b64decode(data["bdata"]), dtype=data["dtype"]).tolist()
    return list(data)  # type: ignore[call-overload]


def _titles(at) -> list[str]:
    return [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]


@pytest.mark.parametrize("opened", ["demo-fashion-edm"], indirect=True)
def test_shipped_sweep_is_drawn_on_open_with_no_verdict_said(opened):
    at = _sweeps_page()
    text = " ".join(m.value for m in at.markdown)
    assert "fig6_sweep.csv" in text
    assert "No verdict at any point: every headline number is withheld at all 80 points" in text
    titles = _titles(at)
    assert sum("vs kernel bandwidth" in t for t in titles) == 2
    assert not any("before the gate" in t for t in titles)
    at.toggle(key="ss_fig6_sweep_raw").set_value(True).run()
    assert not at.exception
    assert sum("before the gate — not a verdict" in t for t in _titles(at)) == 2
    assert not (opened / ".sde-cache" / "activations").exists()  # nothing was extracted


@pytest.mark.parametrize("opened", ["demo-fashion-edm-mem"], indirect=True)
def test_shipped_sweep_says_which_sigma_beats_sqrt_d_from_the_paired_test(opened):
    """The answer over σ comes from the paired differences, for the level on screen: at
    σ_t = 2 the gate withholds F1, so no σ is compared at all."""
    at = _sweeps_page()
    text = " ".join(m.value for m in at.markdown)
    assert "Against √d, on the same subsets and splits (the paired F1 difference" in text
    assert "taken together" in text
    at.select_slider(key="ss_fig6_sweep_noise_level").set_value(2.0).run()
    assert not at.exception
    text = " ".join(m.value for m in at.markdown)
    assert "original: no point compared (the gate withholds its F1)" in text


@pytest.mark.parametrize("opened", ["demo-mnist1d"], indirect=True)
def test_curves_view_answers_on_a_fresh_clone(opened):
    at = _sweeps_page()
    assert at.multiselect(key="cv_models").value == ["ft"]
    text = " ".join(m.value for m in at.markdown)
    assert "**ft**: no checkpoint meets the rule." in text  # FT does not forget on this demo
    assert any("within ±0.1 of the retrained model's (retrained: 0.87)" in c.value
               for c in at.caption)  # fmt: skip
    (title,) = [t for t in _titles(at) if t.startswith("Checkpoint curves")]
    chart = next(json.loads(c.proto.spec) for c in at.get("plotly_chart")
                 if json.loads(c.proto.spec)["layout"]["title"]["text"] == title)  # fmt: skip
    cal = next(t for t in chart["data"] if t["name"] == f"ft: {CALIBRATED_OTR.label}")
    assert _values(cal["x"]) == [0, 2, 4, 6, 8, 10]
    assert _values(cal["y"]) == [0] * 6  # calibrated OTR 0% at every epoch, as stored
    shown = next(d.value for d in at.dataframe if "point" in d.value.columns)
    assert shown["stored"].all() and len(shown) == 6
    assert not any(b.key == "cv_run" for b in at.button)  # nothing missing: nothing to run
    at.multiselect(key="cv_models").set_value(["ft", "original"]).run()
    assert not at.exception
    words = " ".join(m.value for m in at.markdown)  # the initial weights: the gate withholds
    assert "**original**: no checkpoint meets the rule; withheld at epoch 0." in words
    assert not (opened / ".sde-cache" / "activations").exists()  # nothing was extracted


@pytest.mark.parametrize("opened", ["demo"], indirect=True)
def test_the_training_curve_answers_on_a_fresh_clone(opened):
    """The Fashion-MNIST demo ships its original's training run (``checkpoints.sqlite``): the
    curve is drawn from it, each point the stored number."""
    from sde_core.inputs.data import load_dataset
    from sde_core.pipeline.workspace_load import load_workspace
    from sde_core.services.curves import checkpoint_curves

    at = _sweeps_page()
    assert at.multiselect(key="cv_models").value == ["original"]
    ws = load_workspace(opened)
    fingerprint = load_dataset(ws.dataset_spec()).fingerprint
    stored = checkpoint_curves(ws, ws.defaults, ["original"], fingerprint=fingerprint).table
    assert stored["stored"].all() and len(stored) == 6  # initial weights, 10–80%, final
    (title,) = [t for t in _titles(at) if t.startswith("Checkpoint curves")]
    chart = next(json.loads(c.proto.spec) for c in at.get("plotly_chart")
                 if json.loads(c.proto.spec)["layout"]["title"]["text"] == title)  # fmt: skip
    cal = next(t for t in chart["data"] if t["name"] == f"original: {CALIBRATED_OTR.label}")
    drawn = dict(zip(_values(cal["x"]), _values(cal["y"]), strict=True))
    for row in stored.itertuples():
        value = getattr(row, CALIBRATED_OTR.key)
        if value == value:  # withheld points are not drawn
            assert drawn[row.step] == pytest.approx(100 * value)
    assert not any(b.key == "cv_run" for b in at.button)  # nothing missing: nothing to run
    assert not (opened / ".sde-cache" / "activations").exists()  # nothing was extracted
