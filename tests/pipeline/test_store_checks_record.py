"""SQLite's structural check of a results store, recorded for the file's stamp
(``ResultsStore(..., checks=StampRecords(...))``): another process opening the unchanged file
trusts the recorded pass instead of reading every page again (at 500 models the check read a
file of hundreds of MB on each page's first load); a write, a replaced file or damage found by
the check itself means the check runs again, and a damaged file is never trusted."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from sde_core.common import stamps
from sde_core.common.stamps import StampRecords
from sde_core.pipeline import store_file
from sde_core.pipeline.store import ResultsStore
from sde_core.pipeline.store_integrity import StoreDamagedError
from sde_core.pipeline.store_verify import forget_shared_checks
from sde_core.services.workspace_info import check_records


@pytest.fixture
def settled_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stamps, "SETTLED_NS", 0)


def _counted_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = store_file.file_problem

    def counted(conn, size):  # type: ignore[no-untyped-def]
        calls.append(size)
        return real(conn, size)

    monkeypatch.setattr(store_file, "file_problem", counted)
    return calls


def _fill(path: Path, units: range) -> int:
    with ResultsStore(path) as s:
        run = s.open_run("ws", {"layer": "output"})
        for i in units:
            s.put_unit(run.id, f"u{i}", {"models": [{"name": f"u{i}"}]},
                       {f"u{i}/h": np.full(2000, float(i))})  # fmt: skip
    with ResultsStore(path) as s:  # the last connection folds the log into the file
        s.close()
    return run.id


def test_a_pass_is_trusted_by_another_process_until_the_file_changes(
    tmp_path: Path, settled_now: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, record = tmp_path / "results.sqlite", tmp_path / "checks.json"
    run = _fill(path, range(3))
    checks = _counted_checks(monkeypatch)
    forget_shared_checks()
    with ResultsStore(path, read_only=True, checks=StampRecords(record)) as s:
        assert s.finished_units(run, arrays=False) == {"u0", "u1", "u2"}
    assert len(checks) == 1 and record.is_file()
    forget_shared_checks()  # what a new process starts from
    with ResultsStore(path, read_only=True, checks=StampRecords(record)) as s:
        assert s.finished_units(run, arrays=False) == {"u0", "u1", "u2"}
    assert len(checks) == 1  # the recorded pass, for this very stamp
    forget_shared_checks()
    with ResultsStore(path, read_only=True) as s:  # no record given: checked
        s.close()
    assert len(checks) == 2
    _fill(path, range(3, 5))  # a write: a new stamp
    del checks[:]
    forget_shared_checks()
    with ResultsStore(path, read_only=True, checks=StampRecords(record)) as s:
        assert len(s.finished_units(run, arrays=False)) == 5
    assert len(checks) == 1


def test_a_damaged_file_is_found_although_an_earlier_pass_was_recorded(
    tmp_path: Path, settled_now: None
) -> None:
    path, record = tmp_path / "results.sqlite", tmp_path / "checks.json"
    _fill(path, range(40))
    forget_shared_checks()
    with ResultsStore(path, read_only=True, checks=StampRecords(record)) as s:
        s.close()
    data = bytearray(path.read_bytes())
    page = 4096
    for at in range(3 * page, len(data) - page, 7 * page):  # b-tree pages scribbled over
        data[at + 8 : at + 64] = b"\xa5" * 56
    path.write_bytes(bytes(data))
    forget_shared_checks()
    with pytest.raises(StoreDamagedError, match="damaged"):
        ResultsStore(path, read_only=True, checks=StampRecords(record))


def test_a_racily_fresh_file_is_checked_and_nothing_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stamps, "SETTLED_NS", 600 * 10**9)  # "just written" on a slow machine
    path, record = tmp_path / "results.sqlite", tmp_path / "checks.json"
    _fill(path, range(2))  # just written: within SETTLED_NS
    checks = _counted_checks(monkeypatch)
    for _ in range(2):
        forget_shared_checks()
        with ResultsStore(path, read_only=True, checks=StampRecords(record)) as s:
            s.close()
    assert len(checks) == 2 and not record.exists()


def test_the_workspace_records_its_checks_in_its_cache_folder(
    tmp_path: Path, settled_now: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sde_core.pipeline.workspace_load import load_workspace
    from sde_core.services.cascade import open_results_store

    demo = Path(__file__).resolve().parents[2] / "assets" / "demo-mnist1d"
    root = tmp_path / "demo"
    shutil.copytree(demo, root, ignore=shutil.ignore_patterns(".sde-cache"))
    ws = load_workspace(root)
    checks = _counted_checks(monkeypatch)
    for _ in range(2):
        forget_shared_checks()
        with open_results_store(ws, read_only=True) as s:
            assert s.list_runs().shape[0] >= 1
    assert len(checks) == 1
    assert check_records(ws).path == root / ".sde-cache" / "checks.json"
    assert (root / ".sde-cache" / "checks.json").is_file()


def test_a_check_record_linked_outside_the_workspace_is_refused_and_never_written(
    tmp_path: Path, settled_now: None
) -> None:
    """``checks.json`` is a cache file like the others: a link out of the workspace is named
    with the fix, nothing is written through it, and the content hash is still computed (from
    every file's bytes)."""
    from sde_core.errors import WorkspaceError
    from sde_core.pipeline.workspace_load import load_workspace
    from sde_core.services.cascade import open_results_store
    from sde_core.services.workspace_info import content_hash, load_bundle

    demo = Path(__file__).resolve().parents[2] / "assets" / "demo-mnist1d"
    root = tmp_path / "ws" / "demo"
    shutil.copytree(demo, root, ignore=shutil.ignore_patterns(".sde-cache"))
    outside = tmp_path / "elsewhere.json"
    outside.write_text("{}")
    (root / ".sde-cache").mkdir()
    (root / ".sde-cache" / "checks.json").symlink_to(outside)
    ws = load_workspace(root, roots=[root])
    with pytest.raises(WorkspaceError, match="remove the link"):
        open_results_store(ws, read_only=True)
    plain = content_hash(ws, load_bundle(ws))
    assert plain == content_hash(ws, load_bundle(ws))
    assert outside.read_text() == "{}"


def test_a_store_this_process_already_trusts_does_not_read_the_record(
    tmp_path: Path, settled_now: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page opens its store several times a run: only the first open of an unchanged file
    reads ``checks.json``."""
    path, record = tmp_path / "results.sqlite", tmp_path / "checks.json"
    _fill(path, range(2))
    forget_shared_checks()
    reads: list[Path] = []
    real = stamps._entries

    def counted(p: Path):  # type: ignore[no-untyped-def]
        reads.append(p)
        return real(p)

    monkeypatch.setattr(stamps, "_entries", counted)
    for _ in range(3):
        with ResultsStore(path, read_only=True, checks=StampRecords(record)) as s:
            s.close()
    assert reads == [record, record]  # the first open: looked up, then merged on its flush
