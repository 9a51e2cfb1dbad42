"""The method leaderboard on the Compare page, on a copy of the shipped Fashion-MNIST demo: its
results store answers at once, so the page shows the leaderboard of the stored evaluation."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from ui_fixtures import app_test, warm_server

from sde_core.pipeline.evaluation.metric_table import CALIBRATED_OTR, OTR
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.workspace_load import load_workspace

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A copy of the shipped demo, opened through SDE_WORKSPACE inside SDE_DATA_ROOTS."""
    folder = tmp_path_factory.mktemp("demo") / "demo"
    skip = shutil.ignore_patterns(".sde-cache", "*.sqlite-wal", "*.sqlite-shm")
    shutil.copytree(ROOT / "assets" / "demo", folder, ignore=skip)
    with pytest.MonkeyPatch.context() as mp, warm_server():
        mp.setenv("SDE_WORKSPACE", str(folder))
        mp.setenv("SDE_DATA_ROOTS", str(folder.parent))
        yield folder


def test_leaderboard_renders_on_the_demo_ranked_with_withheld_said(demo):
    settings = EvalSettings.from_mapping(dataclasses.asdict(load_workspace(demo).defaults))
    assert settings.precision > 0  # the store's run at the precision design answers at once
    at = app_test(ROOT / "app.py", 120)
    at.switch_page("pages/compare.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    board = next(d.value for d in at.dataframe if "paired test" in d.value.columns)
    assert set(board["vs"]) == {"retrained", "original"}
    ranks = board.drop_duplicates("model")["rank"].tolist()
    assert ranks == list(range(1, len(ranks) + 1))
    cal = board[(board["rate"] == CALIBRATED_OTR.label) & (board["vs"] == "retrained")]
    gaps = cal["difference"].abs().tolist()
    finite = [g for g in gaps if g == g]
    assert finite == sorted(finite) and gaps[: len(finite)] == finite  # withheld come last
    otr = board[(board["rate"] == OTR.label) & (board["vs"] == "retrained")]
    keys = list(zip(cal["difference"].abs().round(6), otr["difference"].abs(), strict=True))
    finite_keys = [k for k in keys if k[0] == k[0]]
    assert finite_keys == sorted(finite_keys)  # a tie on calibrated OTR is broken by OTR
    withheld = board[board["why withheld"] != ""]
    assert withheld["difference"].isna().all()
    words = set(board["paired test"]) - {""}
    assert all(w.startswith(("within the uncertainty of", "above", "below")) for w in words)
    chart = next(
        json.loads(c.proto.spec)
        for c in at.get("plotly_chart")
        if "leaderboard" in json.loads(c.proto.spec)["layout"]["title"]["text"]
    )
    shown = board.dropna(subset=["difference"])
    drawn = {(m, *t["name"].split(" − ")) for t in chart["data"] for m in t["y"]}
    assert drawn == set(zip(shown["model"], shown["rate"], shown["vs"], strict=True))
    if not withheld.empty:
        assert any("Withheld (no point drawn)" in c.value for c in at.caption)
