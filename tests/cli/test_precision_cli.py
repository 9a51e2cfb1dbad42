"""`evaluate --precision W [--plan-only]` on the tiny workspace (method §10, §15): the planner's
forecast, the run that follows it, the JSON's precision entries and comparisons."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sde_core.cli import main

PRECISION = ["--precision", "0.3", "--pilot-draws", "3", "--max-draws", "6", "--baseline-targets",
             "0", "--no-store"]  # fmt: skip


@pytest.fixture(scope="module")
def workspace(tiny_workspace: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tiny workspace with its activations but without the stage cache and
    results other tests left: the planner times the pilot it computes (a pilot answered from
    the cache has no time, and the plan says so instead of "on this machine")."""
    folder = tmp_path_factory.mktemp("precision-cli") / "ws"

    def computed(where: str, names: list[str]) -> list[str]:
        if Path(where).name != ".sde-cache":
            return []
        return [n for n in names if n == "stages" or n.startswith("results")]

    shutil.copytree(tiny_workspace, folder, ignore=computed)
    return folder


def _planned_draws(printed: str) -> dict[str, int]:
    """``{model: draws}`` from the ``--plan-only`` lines ``"rl: 12 draws, ..."``."""
    rows = [line for line in printed.splitlines() if " draws" in line]
    return {
        line.split(":")[0]: int(line.split(": ")[1].split(" draws")[0])
        for line in rows
        if not line.startswith("plan at")
    }


def test_plan_only_then_the_run_it_predicts(workspace, tmp_path, capsys):
    models = ["--models", "retrained,FT"]
    assert main(["evaluate", str(workspace), *PRECISION, *models, "--plan-only"]) == 0
    plan = capsys.readouterr().out
    assert "plan at ±0.3: ≈" in plan and "on this machine" in plan
    predicted = _planned_draws(plan)
    assert set(predicted) == {"retrained", "FT"}
    out = tmp_path / "out.json"
    assert main(["evaluate", str(workspace), *PRECISION, *models, "--json", str(out)]) == 0
    assert "precision ±0.3" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    for name, entry in doc["models"].items():
        assert entry["draws"] == predicted[name]  # the planner's draws are the run's
        assert entry["precision"]["target"] == 0.3
        if entry["precision"]["reached"]:
            assert entry["precision"]["half_width"] <= 0.3
    # no original among the evaluated models: FT against the retrained model only
    assert {(c["model"], c["reference"]) for c in doc["comparisons"]} == {("FT", "retrained")}
    for c in doc["comparisons"]:
        assert set(c) >= {"model", "reference", "metric", "difference", "ci"}
        if c["ci"] is not None:
            assert c["ci"][0] <= c["difference"] <= c["ci"][1]


def test_plan_only_without_a_target_is_one_error_line(workspace, capsys):
    assert main(["evaluate", str(workspace), "--plan-only", "--no-store"]) != 0
    err = capsys.readouterr().err
    assert err.startswith("error:") and "--precision" in err
