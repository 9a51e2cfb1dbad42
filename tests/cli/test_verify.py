"""``report`` and ``verify`` on a copy of the shipped Fashion-MNIST demo: the report pins what
was evaluated, ``verify`` passes on it and fails, naming the model and the file, after one byte
of one checkpoint changes. Two models at reduced settings keep it to seconds."""

from __future__ import annotations

import json
import math
import os
import shutil
import zipfile
from pathlib import Path

import pytest
from helpers.designs import REPORT_FLAGS

from sde_core.cli import main
from sde_core.common.hashing import file_sha256
from sde_core.common.paths import ROOTS_ENV
from sde_core.errors import SettingsError
from sde_core.pipeline.settings import ALGORITHM_VERSION
from sde_core.services.report_verify import load_report, verify_report
from sde_core.viz.figures import export

DEMO = Path(__file__).resolve().parents[2] / "assets" / "demo"
SMALL = REPORT_FLAGS  # the two evaluations of two models in seconds


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A copy of the demo and the JSON report of two of its models."""
    base = tmp_path_factory.mktemp("verify")
    ws = base / "demo"
    shutil.copytree(DEMO, ws, ignore=shutil.ignore_patterns(".sde-cache", "*.sqlite-*"))
    out = base / "report"
    args = ["report", str(ws), "--out", str(out), "--models", "original,ft", "--no-pdf", "--paper"]
    with pytest.MonkeyPatch.context() as mp:  # the paper archive's tables only: no Chromium
        mp.setattr(export, "_kaleido_installed", lambda: False)
        assert main([*args, *SMALL, "--quiet"]) == 0
    return ws, out / "sde-report-demo.json"


@pytest.mark.slow  # the module's report fixture: two evaluations, ~23 s on 2 cores (CI runs it)
def test_report_paper_writes_the_tables_and_says_why_no_figures(report):
    _, path = report
    archive = zipfile.ZipFile(path.with_name("sde-report-demo-paper.zip"))
    names = archive.namelist()
    assert "tables/01-headline-numbers.tex" in names and "tables/01-headline-numbers.md" in names
    headline = archive.read("tables/01-headline-numbers.md").decode()
    assert len(headline.strip().splitlines()) == 4  # header, rule, the two models
    assert "| original |" in headline and "| ft |" in headline
    assert "No figures: " in archive.read("README.txt").decode()


@pytest.mark.slow  # the module's report fixture: two evaluations, ~23 s on 2 cores (CI runs it)
def test_report_pins_what_was_evaluated(report):
    ws, path = report
    doc = json.loads(path.read_text())
    assert doc["format"] == "sde-report" and sorted(doc["models"]) == ["ft", "original"]
    manifest = doc["manifest"]
    assert manifest["generator"]["algorithm_version"] == ALGORITHM_VERSION
    assert manifest["settings"]["targets"] == 20
    assert manifest["settings"]["algorithm"] == ALGORITHM_VERSION
    for name in ("original", "ft"):
        entry = manifest["models"][name]
        assert entry["sha256"] == file_sha256(ws / entry["checkpoint"])
        assert entry["matches_recorded"] is True  # the demo records its hashes
    assert manifest["forget_set"]["size"] == 1200
    assert manifest["forget_set"]["file_sha256"] == file_sha256(ws / "forget.npy")
    assert len(manifest["data"]["fingerprint"]) == 64 and manifest["data"]["n_train"] == 6000
    assert manifest["environment"]["packages"]["numpy"]
    assert manifest["seeds"]["evaluation"] == 0
    assert manifest["timing"]["evaluation_wall_seconds"] > 0
    assert doc["models"]["original"]["verdict"] in ("not forgotten", "mixed")
    html = path.with_suffix(".html").read_text(encoding="utf-8")
    assert manifest["models"]["ft"]["sha256"] in html
    assert load_report(path.with_suffix(".html")) == load_report(path)


@pytest.mark.slow  # > 10 s on 2 cores (make test-slow, CI)
def test_verify_passes_then_names_the_changed_checkpoint(report, capsys, monkeypatch):
    ws, path = report
    monkeypatch.setenv(ROOTS_ENV, str(ws.parent))  # the report's folder is an allowed one
    assert main(["verify", str(path), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "original: identical" in out and "ft: identical" in out
    assert "identical: all 2 models recomputed to the reported values" in out

    checkpoint = ws / "models" / "ft.safetensors"
    saved = checkpoint.read_bytes()
    data = bytearray(saved)
    data[-2] ^= 0x01  # one byte of the last weight
    checkpoint.write_bytes(bytes(data))
    try:
        assert main(["verify", str(path), "--quiet"]) == 1
        out = capsys.readouterr().out
    finally:
        checkpoint.write_bytes(saved)
    assert "original: identical" in out
    assert "ft: DIFFERS" in out and "file hash differs: models/ft.safetensors" in out
    assert "DIFFERS: 1 of 2 models differ (ft)" in out


@pytest.mark.slow  # the module's report fixture: two evaluations, ~23 s on 2 cores (CI runs it)
def test_verify_reports_shared_and_entry_changes(report, tmp_path):
    ws, path = report
    doc = json.loads(path.read_text())
    del doc["models"]["ft"]  # one model keeps this check to one recomputation
    doc["settings"]["algorithm"] = ALGORITHM_VERSION - 1
    doc["manifest"]["models"]["original"]["arch"] = "resnet18"
    doc["models"]["original"]["otr"] = 0.5
    doc["models"]["original"]["f1"] = doc["models"]["original"]["f1"] * (1 + 1e-13)  # printing
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    result = verify_report(edited, ws)
    assert not result.ok and result.differing == ["original"]
    assert any("ALGORITHM_VERSION" in s for s in result.shared)
    (original,) = result.models
    differing = [d.field for d in original.comparison.differences if d.outcome == "differs"]
    assert differing == ["otr"]  # f1 moved only as a printed float does
    assert any("arch was 'resnet18'" in p for p in original.problems)
    assert "DIFFERS for every model: ALGORITHM_VERSION" in "\n".join(result.lines())


def test_bad_reports_are_one_line_errors(tmp_path, capsys):
    with pytest.raises(SettingsError, match="does not exist"):
        load_report(tmp_path / "missing.json")
    (tmp_path / "other.json").write_text('{"settings": {}}')
    assert main(["verify", str(tmp_path / "other.json")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "not an SDE report" in err[0]


@pytest.mark.slow  # the module's report fixture: two evaluations, ~23 s on 2 cores (CI runs it)
def test_verify_never_follows_a_report_outside_the_allowed_folders(report, tmp_path, capsys,
                                                                    monkeypatch):  # fmt: skip
    """Issue 31 item 3: without --workspace the report's manifest does not choose the folder."""
    ws, path = report
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    monkeypatch.setenv(ROOTS_ENV, str(allowed))
    assert main(["verify", str(path), "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: the report names the workspace folder")
    assert str(ws) in err[0] and "--workspace" in err[0] and ROOTS_ENV in err[0]


@pytest.mark.slow  # the module's report fixture: two evaluations, ~23 s on 2 cores (CI runs it)
def test_non_finite_reported_numbers_always_differ(report, tmp_path):
    """Issue 31 item 3: every reference_p* / panel_p* set to NaN (and a score to Infinity) is a
    difference, never "within the near-tie p range"."""
    ws, path = report
    doc = json.loads(path.read_text())
    del doc["models"]["ft"]
    entry = doc["models"]["original"]
    forged = sorted(k for k in entry if k.startswith(("reference_p", "panel_p")))
    assert len(forged) >= 4
    for key in forged:
        value = entry[key]
        entry[key] = [math.nan] * len(value) if isinstance(value, list) else math.nan
    entry["dependence_score"] = math.inf
    edited = tmp_path / "nan.json"
    edited.write_text(json.dumps(doc))  # allow_nan: NaN and Infinity literals
    result = verify_report(edited, ws)
    assert not result.ok and result.differing == ["original"]
    differs = {d.field: d for d in result.models[0].comparison.differences}
    for key in [*forged, "dependence_score"]:
        assert differs[key].outcome == "differs", key
        assert "non-finite" in differs[key].reason
    assert "near-tie p range" not in "\n".join(result.lines())


_HOSTILE = {
    "deep.json": "[" * 100_000 + "]" * 100_000,
    "digits.json": '{"format": "sde-report", "format_version": ' + "1" * 5000 + "}",
    "version.json": '{"format": "sde-report", "format_version": true, "manifest": {}}',
    "manifest.json": '{"format": "sde-report", "format_version": 1, "manifest": {}}',
    "path.json": '{"format": "sde-report", "format_version": 1, '
    '"manifest": {"workspace": {"path": 12345}}}',
    "models.json": '{"format": "sde-report", "format_version": 1, '
    '"manifest": {"workspace": {"path": "/x"}}, "models": "x"}',
    "counts.json": '{"format": "sde-report", "format_version": 1, '
    '"manifest": {"workspace": {"path": "/x"}, "data": {"n_train": NaN}}}',
    "deep.html": '<script type="application/json" id="sde-report">'
    + "[" * 100_000
    + "]" * 100_000
    + "</script>",
}
_EXPECTED = {
    "deep.json": "nested 100000 levels deep",
    "digits.json": "integer of 5000 digits",
    "version.json": "format version 'True'",
    "manifest.json": "manifest.workspace must be a table",
    "path.json": "manifest.workspace.path must be a folder path, not int",
    "models.json": "models must be a table of models, not str",
    "counts.json": "manifest.data.n_train must be a whole number",
    "deep.html": "nested 100000 levels deep",
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", sorted(_HOSTILE))
def test_hostile_reports_are_one_line_errors(name, tmp_path, capsys):
    """Issue 31 item 8: each of these raised a traceback (RecursionError, ValueError, KeyError,
    TypeError, AttributeError); now one line naming the problem."""
    bad = tmp_path / name
    bad.write_text(_HOSTILE[name])
    assert main(["verify", str(bad), "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and _EXPECTED[name] in err[0], err


@pytest.mark.timeout(30)
def test_a_report_that_is_a_fifo_or_a_device_is_refused_at_once(tmp_path, capsys):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.html"
    zero.symlink_to("/dev/zero")
    for bad in (fifo, zero):
        assert main(["verify", str(bad), "--quiet"]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is not a regular file" in err[0], err
