"""File stamps and the records of what a check of an unchanged file found
(:mod:`sde_core.common.stamps`): a value is served only for the exact stamp it was recorded
with; any write to the file, a replaced file, a racily fresh file or a damaged, hostile or
missing record file means the check runs again."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sde_core.common import stamps
from sde_core.common.stamps import RecordedHashes, StampRecords, identity
from sde_core.pipeline import workspace as workspace_module
from sde_core.pipeline.workspace import workspace_hash


@pytest.fixture
def settled_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files count as settled at once (the racily-clean guard is tested on its own)."""
    monkeypatch.setattr(stamps, "SETTLED_NS", 0)


def test_a_fresh_file_a_folder_and_a_missing_file_have_no_stamp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stamps, "SETTLED_NS", 600 * 10**9)  # "fresh" on a slow machine too
    fresh = tmp_path / "f.bin"
    fresh.write_bytes(b"abc")
    assert identity(fresh) is None  # modified within SETTLED_NS: its time may not yet tell
    assert identity(tmp_path) is None
    assert identity(tmp_path / "missing") is None


def test_every_write_changes_the_stamp_even_with_its_times_set_back(
    tmp_path: Path, settled_now: None
) -> None:
    f = tmp_path / "f.bin"
    f.write_bytes(b"abcd")
    first = identity(f)
    assert first is not None and len(first) == 5 and first[2] == 4
    assert identity(f) == first
    before = f.stat()
    f.write_bytes(b"abce")  # same size
    os.utime(f, ns=(before.st_atime_ns, before.st_mtime_ns))  # modification time set back
    after = identity(f)
    assert after is not None and after != first  # the status-change time cannot be set back
    replaced = tmp_path / "g.bin"
    replaced.write_bytes(b"abcd")
    os.replace(replaced, f)
    assert identity(f) not in (first, after)  # another inode


def test_records_round_trip_across_objects_for_the_exact_stamp_only(tmp_path: Path) -> None:
    path = tmp_path / "cache" / "checks.json"
    rec = StampRecords(path)
    rec.put("a", (1, 2, 3), "one")
    rec.put("b", None, "never")  # no stamp: nothing recorded
    assert rec.get("a", (1, 2, 3)) == "one"
    assert rec.flush() is True
    assert rec.flush() is False  # nothing new
    again = StampRecords(path)
    assert again.get("a", (1, 2, 3)) == "one"
    assert again.get("a", (1, 2, 4)) is None
    assert again.get("a", None) is None
    assert again.get("b", (1,)) is None


def test_two_writers_merge_and_the_newest_entries_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "checks.json"
    one, two = StampRecords(path), StampRecords(path)
    one.put("x", (1,), "from one")
    two.put("y", (2,), "from two")
    one.flush()
    two.flush()
    merged = StampRecords(path)
    assert merged.get("x", (1,)) == "from one" and merged.get("y", (2,)) == "from two"
    monkeypatch.setattr(stamps, "MAX_RECORDS", 3)
    many = StampRecords(path)
    for i in range(5):
        many.put(f"k{i}", (i,), str(i))
    many.flush()
    kept = json.loads(path.read_text())["entries"]
    assert list(kept) == ["k2", "k3", "k4"]


def test_a_record_that_cannot_be_written_changes_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    rec = StampRecords(blocker / "checks.json")
    rec.put("a", (1,), "v")
    assert rec.flush() is False
    assert rec.get("a", (1,)) == "v"  # still known to this object


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\xff\xfe not utf-8",
        b"[" * 100_000,
        b'{"format": 1, "entries": {"a": [[1, 2], "v", 3], "c": [[1, 2e400], "v"]}}',
        b'{"format": 2, "entries": {"a": [[1, 2], "v"]}}',
        b'{"format": 1, "entries": {"a": [[1, 99999999999999999999999999999999999], "v"]}}',
        b'{"format": 1, "entries": {"a": [[1, true], "v"], "c": [[1, 2], 5]}}',
    ],
)
def test_a_damaged_or_hostile_record_file_counts_as_empty(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "checks.json"
    path.write_bytes(content)
    rec = StampRecords(path)
    assert rec.get("a", (1, 2)) is None
    assert rec.get("c", (1, 2)) is None


def test_a_record_file_that_is_a_pipe_or_too_large_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert StampRecords(fifo).get("a", (1,)) is None  # returns at once: no blocking read
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"format": 1, "entries": {"a": [[1], "v"]}}))
    monkeypatch.setattr(stamps, "MAX_RECORD_BYTES", 10)
    assert StampRecords(big).get("a", (1,)) is None


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)
_FIXTURE_OK = [HealthCheck.function_scoped_fixture]


@settings(max_examples=120, deadline=None, suppress_health_check=_FIXTURE_OK)
@given(entries=st.dictionaries(st.sampled_from(["a", "b"]), _JSON, max_size=2),
       stamp=st.lists(st.integers(0, 5), min_size=1, max_size=3))  # fmt: skip
def test_only_a_well_formed_entry_for_the_exact_stamp_is_served(
    tmp_path: Path, entries: dict[str, object], stamp: list[int]
) -> None:
    """Whatever JSON sits in the record file, a value comes back only from an entry of the
    form [stamp, text] whose stamp equals the one asked for."""
    path = tmp_path / "checks.json"
    path.write_text(json.dumps({"format": 1, "entries": entries}))
    rec = StampRecords(path)
    for key, entry in entries.items():
        got = rec.get(key, tuple(stamp))
        well_formed = (
            isinstance(entry, list) and len(entry) == 2 and entry[0] == stamp
            and all(type(v) is int for v in entry[0]) and isinstance(entry[1], str)
        )  # fmt: skip
        assert got == (entry[1] if well_formed else None)  # type: ignore[index]


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    read: list[Path] = []
    real = workspace_module.file_sha256

    def counted(path: str | Path) -> str:
        read.append(Path(path))
        return real(path)

    monkeypatch.setattr(workspace_module, "file_sha256", counted)
    return read


def test_a_new_process_takes_an_unchanged_files_digest_from_the_record(
    ws_root: Path, tmp_path: Path, settled_now: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sde_core.pipeline.workspace_load import load_workspace

    ws = load_workspace(ws_root)
    plain = workspace_hash(ws)
    record = tmp_path / "checks.json"
    read = _counting(monkeypatch)
    first = RecordedHashes(StampRecords(record))
    assert workspace_hash(ws, file_hashes=first) == plain
    assert len(read) == 1 + len(ws.models)  # the forget set and each model's file
    first.flush()
    read.clear()
    second = RecordedHashes(StampRecords(record))  # what a new process makes
    assert workspace_hash(ws, file_hashes=second) == plain
    assert read == []
    # a model file rewritten with other bytes, its modification time set back: hashed again
    model_file = ws.path(ws.models[0].checkpoint)
    before = model_file.stat()
    data = bytearray(model_file.read_bytes())
    data[-1] ^= 0xFF
    model_file.write_bytes(bytes(data))
    os.utime(model_file, ns=(before.st_atime_ns, before.st_mtime_ns))
    third = RecordedHashes(StampRecords(record))
    changed = workspace_hash(ws, file_hashes=third)
    assert read == [model_file]
    assert changed != plain and changed == workspace_hash(ws)


def test_a_digest_is_not_recorded_when_the_file_changed_while_it_was_hashed(
    tmp_path: Path, settled_now: None
) -> None:
    f = tmp_path / "m.bin"
    f.write_bytes(b"one")
    hashes = RecordedHashes(StampRecords(tmp_path / "checks.json"))
    assert f not in hashes  # takes the stamp the digest is recorded under
    f.write_bytes(b"two")  # changed while "hashed"
    hashes[f] = "0" * 64
    hashes.flush()
    assert f not in RecordedHashes(StampRecords(tmp_path / "checks.json"))


def test_a_folder_is_hashed_every_time(tmp_path: Path, settled_now: None) -> None:
    """A folder's times do not change when a file inside it is rewritten: never recorded."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "w.bin").write_bytes(b"1")
    hashes = RecordedHashes(StampRecords(tmp_path / "checks.json"))
    assert folder not in hashes
    hashes[folder] = "1" * 64
    hashes.flush()
    assert folder not in RecordedHashes(StampRecords(tmp_path / "checks.json"))
