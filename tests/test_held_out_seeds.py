"""The held-out seed study of the Fashion-MNIST demo's RL and SalUn (reproduction/held_out_seeds.py,
issue 33): its table is its JSON's, it studies the shipped demo under this release's numerics,
and every precision state it reports is re-derived here from the intervals it reports (method
§15, rule 2: the half-width judged is the interval given)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

from helpers.scripts import load_script

from sde_core.pipeline.settings import ALGORITHM_VERSION, PRECISION_RULE_VERSION
from sde_core.pipeline.store import ResultsStore

ROOT = Path(__file__).resolve().parents[1]


def _study() -> ModuleType:
    return load_script("reproduction/held_out_seeds.py")


def test_the_held_out_seed_study_is_its_json_and_the_shipped_demo() -> None:
    study = _study()
    data = json.loads((study.OUT / "held_out_seeds.json").read_text(encoding="utf-8"))
    md = (study.OUT / "held_out_seeds.md").read_text(encoding="utf-8")
    assert md == study.markdown(data), "run python reproduction/held_out_seeds.py --tables-only"
    assert data["algorithm"] == ALGORITHM_VERSION
    assert data["precision_rule"] == PRECISION_RULE_VERSION
    with ResultsStore(ROOT / data["demo"] / "results.sqlite", read_only=True) as store:
        shipped = str(store.list_runs()["workspace_hash"].iloc[0])
    assert data["workspace_hash"] == shipped  # the shipped demo's models and data
    seeds = [run["seed"] for run in data["runs"]]
    assert seeds == list(study.SEEDS) and data["first_seeds"] == study.FIRST_SEEDS


def test_each_precision_state_is_the_one_its_intervals_give() -> None:
    """Rule 2 from the reported intervals alone: "reached" when every bounded rate's interval
    has (hi − lo)/2 ≤ W, "not reached" when one is wider with the budget left; the widest
    half-width reported is the widest interval's."""
    study = _study()
    data = json.loads((study.OUT / "held_out_seeds.json").read_text(encoding="utf-8"))
    target, budget = data["defaults"]["precision"], data["defaults"]["max_draws"]
    states = set()
    for run in data["runs"]:
        for name, m in run["models"].items():
            halves = [
                (m[f"{rate}_hi"] - m[f"{rate}_lo"]) / 2
                for rate in study.RATES
                if m[f"{rate}_lo"] is not None and m[f"{rate}_hi"] is not None
            ]
            where = f"{name} at seed {run['seed']}"
            if m["precision"] == "not applied" or not halves:
                continue
            states.add(m["precision"])
            assert abs(m["half_width"] - max(halves)) < 1e-9, where
            if m["draws"] < m["draws_needed"]:
                assert m["precision"] == "not reached (budget spent)" and m["draws"] == budget
            elif max(halves) <= target:
                assert m["precision"] == "reached", where
            else:
                assert m["precision"] == "not reached" and m["why"], where
    assert "reached" in states
