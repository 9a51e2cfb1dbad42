"""The Compare page at many models: a workspace of 16 entries whose results are written into
its results store through the store API (each a copy of one of the mnist1d demo's stored
models), so the page answers from the store: filters, the grouped summary, one page of models
in the table, and every model in the CSV."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from ui_fixtures import app_test, warm_server

from sde_core.inputs.data import load_dataset
from sde_core.pipeline.store import ResultsStore, workspace_store_path
from sde_core.pipeline.workspace import workspace_hash
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.pipeline.workspace_write import write_workspace

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "assets" / "demo-mnist1d"
N_COPIES = 14  # + the original and the retrained model: 16 > the page's 12


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("many") / "ws"
    folder.mkdir()
    for name in ("data.npz", "forget.npy", "LICENSE-data.txt"):
        shutil.copy(DEMO / name, folder / name)
    demo = load_workspace(DEMO)
    (folder / "models").mkdir()
    entries, copies = [], {}
    for entry in (demo.original(), demo.model("retrained")):
        shutil.copy(demo.path(entry.checkpoint), folder / "models" / f"{entry.name}.safetensors")
        entries.append(dataclasses.replace(entry, checkpoint=f"models/{entry.name}.safetensors",
                                           checkpoints=[], init_checkpoint=None))  # fmt: skip
        copies[entry.name] = entry.name
    for i in range(N_COPIES):
        template = demo.model(("ft", "ga", "rl")[i % 3])
        name = f"{template.name}-s{i}"
        shutil.copy(demo.path(template.checkpoint), folder / "models" / f"{name}.safetensors")
        entries.append(dataclasses.replace(template, name=name, seed=i, sha256=None,
                                           checkpoint=f"models/{name}.safetensors",
                                           checkpoints=[]))  # fmt: skip
        copies[name] = template.name
    write_workspace(dataclasses.replace(demo, root=folder.resolve(), models=entries))
    ws = load_workspace(folder)
    ws_hash = workspace_hash(ws, data_fingerprint=load_dataset(ws.dataset_spec()).fingerprint)
    with ResultsStore(DEMO / "results.sqlite", read_only=True) as src:
        run_id = int(src.list_runs()["id"].iloc[0])
        tables = {t: src.records(run_id, t) for t in src.tables(run_id)}
        arrays = {m: {k[len(m) + 1:]: src.array(run_id, k)
                      for k in src.array_names(run_id, f"{m}/")}
                  for m in set(copies.values())}  # fmt: skip
    with ResultsStore(workspace_store_path(folder)) as store:
        run = store.open_run(ws_hash, ws.defaults.result_key())
        for name, template in copies.items():
            rows = {}
            for table, records in tables.items():
                column = "name" if table == "models" else "model"
                mine = [dict(r, **{column: name}) for r in records if r.get(column) == template]
                if mine:
                    rows[table] = mine
            store.put_unit(run.id, name, rows,
                           {f"{name}/{k}": v for k, v in arrays[template].items()})  # fmt: skip
        store.mark_complete(run.id)
    return folder


@pytest.mark.slow  # 16 models on the Compare page: ~11 s on 2 busy cores
def test_compare_pages_filters_and_groups_many_models(many, monkeypatch):
    monkeypatch.setenv("SDE_WORKSPACE", str(many))
    monkeypatch.setenv("SDE_DATA_ROOTS", str(many.parent))
    with warm_server():
        at = app_test(ROOT / "app.py", 180)
        at.switch_page("pages/compare.py")
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert any("16 models: filter, group, page" in s.value for s in at.subheader)
        groups = next(d.value for d in at.dataframe if "conflicting" in d.value.columns)
        by_method = dict(zip(groups["method"], groups["models"], strict=True))
        assert by_method == {"ft": 5, "ga": 5, "rl": 4, "retrain": 1, "train": 1}
        assert dict(zip(groups["method"], groups["conflicting"], strict=True))["rl"] == 4
        shown = next(d.value for d in at.dataframe if "name" in d.value.columns
                     and "conflicting" not in d.value.columns)  # fmt: skip
        assert len(shown) == 16  # 20 a page: every model on page 1
        at.multiselect(key="c_f_methods").set_value(["rl"]).run()
        assert not at.exception
        shown = next(d.value for d in at.dataframe if "name" in d.value.columns
                     and "conflicting" not in d.value.columns)  # fmt: skip
        assert set(shown["name"]) == {"original", "retrained", "rl-s2", "rl-s5", "rl-s8", "rl-s11"}
        assert not any(t.label.startswith("Verdicts of") and t.value for t in at.toggle)
