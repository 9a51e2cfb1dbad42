"""Text columns of a stored run read back as text: a run whose units were written by different
evaluations (here: the demo's classifier units, which have no ``behaviour_measure`` column,
beside one written with it, as a page's "evaluate the rest here" does) reads ``""`` — not NaN —
where a unit lacks the column. NaN there was true to every ``if row["evidence_conflict"]`` and
broke the report's JSON document (``allow_nan=False``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
from helpers.many_models import store_copies
from ui_fixtures import demo_workspace

from sde_core.inputs.data import load_dataset
from sde_core.pipeline.evaluation.summary import ModelSummary, model_json
from sde_core.pipeline.evaluation.workspace_run import stored_result
from sde_core.pipeline.store import ResultsStore, workspace_store_path
from sde_core.pipeline.workspace import workspace_hash
from sde_core.pipeline.workspace_load import load_workspace


def test_text_columns_are_the_summarys_str_fields() -> None:
    text = ModelSummary.text_columns()
    assert {"evidence_conflict", "inconclusive_reason", "behaviour_measure", "name"} <= set(text)
    assert "otr" not in text and "draws" not in text


def test_filled_text_reads_missing_text_as_empty_and_leaves_numbers() -> None:
    frame = pd.DataFrame({"name": ["a", "b"], "evidence_conflict": [float("nan"), "says so"],
                          "behaviour_measure": [None, ""], "otr": [float("nan"), 0.5]})  # fmt: skip
    out = ModelSummary.filled_text(frame)
    assert out["evidence_conflict"].tolist() == ["", "says so"]
    assert out["behaviour_measure"].tolist() == ["", ""]
    assert math.isnan(out["otr"].iloc[0]) and out["otr"].iloc[1] == 0.5
    assert frame["evidence_conflict"].isna().iloc[0]  # the input is left as it was
    clean = frame.drop(columns=["evidence_conflict", "behaviour_measure"])
    assert ModelSummary.filled_text(clean) is clean  # nothing to fill: no copy


def test_a_run_of_mixed_units_reads_back_text_and_json(tmp_path: Path) -> None:
    folder = demo_workspace(tmp_path / "ws", 6)
    store_copies(
        folder,
        {n: n for n in ("original", "retrained", "ft", "ga", "rl")},
        complete=False,
        models_without=("behaviour_measure",),
    )  # an older release's rows
    store_copies(folder, {"salun": "salun"}, models_extra={"behaviour_measure": ""})
    ws = load_workspace(folder)
    names = [m.name for m in ws.models]
    with ResultsStore(workspace_store_path(folder), read_only=True) as store:
        raw = store.rows(int(store.list_runs()["id"].iloc[0]), "models", names)
        assert raw["behaviour_measure"].isna().sum() == 5  # what the store itself gives
        h = workspace_hash(ws, data_fingerprint=load_dataset(ws.dataset_spec()).fingerprint)
        result = stored_result(store, h, ws.defaults, names)
    assert result is not None
    models = result.models
    for column in ("behaviour_measure", "evidence_conflict", "inconclusive_reason"):
        assert not models[column].isna().any(), column
    # the demo's conflicts stay conflicts, and no other model gained one
    conflicted = sorted(models.loc[models["evidence_conflict"] != "", "name"])
    assert conflicted == ["rl", "salun"]
    for row in models.to_dict("records"):
        json.dumps(model_json(row), allow_nan=False)  # raised ValueError on NaN before
