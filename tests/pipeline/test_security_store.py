"""A damaged results store is never read back as if fine, and its damaged units recompute.

Acceptance (issue 12): a real store, written by a tiny evaluation, gets one seeded corruption
(a random page overwritten with random bytes, one byte flipped inside an array blob or a row
payload, garbage in a dtype, shape or the settings, or the file truncated by one byte). Reading
it either raises a :class:`~sde_core.errors.StoreError` or returns exactly what was stored —
never different rows or arrays — and ``repair=True`` followed by the same evaluation restores
the original numbers.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.designs import fixed_settings

from sde_core.errors import StoreError
from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
from sde_core.pipeline.store import ResultsStore

SETTINGS = fixed_settings(
    subset_size=16, targets=6, splits=20, panel_size=20, null_pairs=4, baseline_targets=4
)
KINDS = ("page", "page", "page", "blob", "blob", "payload", "payload", "field", "truncate")
CASES = 27  # three of each kind, seeded


def _snapshot(store: ResultsStore) -> dict[str, Any]:
    """Everything a reader can get from the store (timings aside)."""
    out: dict[str, Any] = {}
    for run_id in store.list_runs()["id"].tolist():
        run = store.get_run(run_id)
        units = sorted(store.finished_units(run_id))
        tables = {
            t: [{k: v for k, v in r.items() if k != "eval_seconds"} for r in records]
            for t in store.tables(run_id)
            for records in [store.records(run_id, t)]
        }
        arrays = {name: store.array(run_id, name) for name in store.array_names(run_id)}
        out[run.settings_hash] = (run.settings, units, tables, arrays)
    return out


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.keys() != b.keys():
        return False
    for key in a:
        (sa, ua, ta, aa), (sb, ub, tb, ab) = a[key], b[key]
        if sa != sb or ua != ub or _canon(ta) != _canon(tb) or aa.keys() != ab.keys():
            return False
        for name in aa:
            x, y = aa[name], ab[name]
            if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
                return False
    return True


def _canon(tables: dict[str, list[dict[str, Any]]]) -> str:
    return repr({t: sorted(map(repr, rows)) for t, rows in tables.items()})


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A tiny workspace (MLP original + random init, 160/120 rows), evaluated into a store."""
    from sde_core.cli import main

    root = tmp_path_factory.mktemp("store_ws")
    ws = root / "ws"
    ws.mkdir()
    rng = np.random.default_rng(0)
    np.savez(  # inside the workspace folder: the path policy refuses data outside it
        ws / "data.npz",
        x_train=rng.normal(size=(160, 4)).astype(np.float32),
        y_train=rng.integers(0, 3, 160),
        x_test=rng.normal(size=(120, 4)).astype(np.float32),
        y_test=rng.integers(0, 3, 120),
    )
    mlp = ["--arch", "mlp", "--arch-kwarg", "input_dim=4", "--arch-kwarg", "hidden=[16]",
           "--arch-kwarg", "num_classes=3"]  # fmt: skip
    assert main(["workspace", "init", str(ws), "--dataset-kind", "npz", "--dataset-root",
                 "data.npz", "--random-forget", "0.25"]) == 0  # fmt: skip
    assert main(["train", str(ws), "--name", "original", *mlp, "--epochs", "3"]) == 0
    assert main(["train", str(ws), "--name", "rand", "--role", "random", *mlp]) == 0
    pristine, cache = root / "pristine.sqlite", root / "activations"
    with ResultsStore(pristine) as store:
        evaluate_workspace(ws, SETTINGS, store=store, cache_dir=cache)
        snapshot = _snapshot(store)
    with sqlite3.connect(pristine) as conn:
        blobs = [r[0] for r in conn.execute("SELECT data FROM arrays")]
        payloads = [r[0] for r in conn.execute("SELECT payload FROM table_rows")]
        fields = [r[0] for r in conn.execute("SELECT dtype FROM arrays")]
        fields += [r[0] for r in conn.execute("SELECT shape FROM arrays")]
        fields += [r[0] for r in conn.execute("SELECT settings FROM runs")]
    conn.close()
    return {"ws": ws, "pristine": pristine, "cache": cache, "snapshot": snapshot,
            "blobs": blobs, "payloads": payloads, "fields": fields}  # fmt: skip


def _corrupt(path: Path, kind: str, rng: np.random.Generator, ev: dict[str, Any]) -> str:
    """Damage ``path`` once; returns a description for the failure message."""
    raw = bytearray(path.read_bytes())
    if kind == "truncate":
        path.write_bytes(bytes(raw[:-1]))
        return "truncated by one byte"
    if kind == "page":
        page_size = int.from_bytes(raw[16:18], "big")
        page = int(rng.integers(len(raw) // page_size))
        offsets = page * page_size + rng.choice(page_size, int(rng.integers(1, 9)), replace=False)
        for off in offsets:
            raw[off] = int(rng.integers(256))
        what = f"page {page + 1}: {len(offsets)} random bytes"
    else:
        pool = {"blob": ev["blobs"], "payload": ev["payloads"], "field": ev["fields"]}[kind]
        # A value longer than a page continues on overflow pages, so its bytes are not
        # contiguous in the file; those are damaged by the "page" kind instead.
        values = [v if isinstance(v, bytes) else v.encode() for v in pool]
        values = [v for v in values if len(v) <= 1000]
        needle = values[int(rng.integers(len(values)))]
        start = raw.find(needle)
        assert start >= 0, "the stored value is not in the file"
        off = start + int(rng.integers(len(needle)))
        raw[off] = (raw[off] + int(rng.integers(1, 256))) % 256
        what = f"{kind}: byte {off - start} of a {len(needle)}-byte value"
    path.write_bytes(bytes(raw))
    return what


@pytest.mark.parametrize("case", range(CASES))
def test_damage_is_detected_and_recomputes_to_the_original_numbers(evaluated, tmp_path, case):
    rng = np.random.default_rng(1000 + case)
    kind = KINDS[case % len(KINDS)]
    path = tmp_path / "results.sqlite"
    shutil.copyfile(evaluated["pristine"], path)
    what = _corrupt(path, kind, rng, evaluated)
    try:
        with ResultsStore(path) as store:
            seen = _snapshot(store)
    except StoreError as exc:
        detected = True
        assert "\n" not in str(exc)
    else:
        detected = False
        assert _same(seen, evaluated["snapshot"]), f"damage served as data ({what})"
    if not detected:
        return  # the bytes hit unused space: what is read is exactly what was stored
    with ResultsStore(path, repair=True) as store:
        report = store.repair_report
        assert report is not None and (report.dropped or report.moved_to is not None), what
        evaluate_workspace(evaluated["ws"], SETTINGS, store=store, cache_dir=evaluated["cache"])
    if report.moved_to is not None:
        assert report.moved_to.exists()  # the damaged file is kept, never deleted
    with ResultsStore(path) as store:
        assert _same(_snapshot(store), evaluated["snapshot"]), f"not restored ({what})"


def _page_types(raw: bytes) -> list[int]:
    """The b-tree page type byte of every page (page 1's header follows the 100-byte file
    header)."""
    size = int.from_bytes(raw[16:18], "big")
    return [raw[100]] + [raw[i * size] for i in range(1, len(raw) // size)]


@pytest.mark.parametrize(
    ("target", "page_type"),
    [("an index page", 0x0A), ("a table leaf page", 0x0D), ("the file header", None)],
)
def test_structural_damage_is_rebuilt_from_the_units_that_verify(
    evaluated, tmp_path, target, page_type
):
    path = tmp_path / "results.sqlite"
    shutil.copyfile(evaluated["pristine"], path)
    raw = bytearray(path.read_bytes())
    size = int.from_bytes(raw[16:18], "big")
    if page_type is None:
        raw[:16] = b"not a database!!"
    else:
        pages = [i for i, t in enumerate(_page_types(bytes(raw))) if i and t == page_type]
        raw[pages[-1] * size] = 0xFF  # an invalid b-tree page type
    path.write_bytes(bytes(raw))
    with pytest.raises(StoreError, match="repair") as err:
        ResultsStore(path)
    assert "\n" not in str(err.value)
    with ResultsStore(path, repair=True) as store:
        report = store.repair_report
        assert report is not None and report.moved_to is not None and report.moved_to.exists()
        assert "repaired" in report.summary()
        evaluate_workspace(evaluated["ws"], SETTINGS, store=store, cache_dir=evaluated["cache"])
    with ResultsStore(path) as store:
        assert _same(_snapshot(store), evaluated["snapshot"]), target
