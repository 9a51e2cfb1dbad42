"""`python -m sde_core evaluate` end to end on the mnist1d demo: method §10 JSON, one-line
errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.designs import FIXED, FIXED_FLAGS

from sde_core.cli import main
from sde_core.pipeline.demo_recipes import MODEL_NAMES, default_demo_folder

#: Small T/K/n so that one evaluation of the nine models takes seconds.
FAST = [
    "--subset-size",
    "100",
    "--targets",
    "6",
    "--splits",
    "20",
    "--baseline-targets",
    "2",
    *FIXED_FLAGS,
]
SPEC_KEYS = {
    "role",
    "layer",
    "sigma",
    "reference_p",
    "references_valid",
    "otr",
    "otr_ci",
    "f1",
    "calibrated_otr",
    "dependence_score",
    "acc_r",
    "acc_f",
    "acc_te",
    "asr",
    "evidence_conflict",
    "acc_gap_ci",
    "null_out_of_training_fpr",
    "panel_outliers",
    "mmd_f1_ci",
}


@pytest.fixture(scope="module")
def workspace(mnist1d_copy: Callable[[str], Path]) -> Path:
    """A copy of the mnist1d demo without its results store (so evaluations really compute)."""
    return mnist1d_copy("evaluate-cli")


def one_error_line(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("error:") and "Traceback" not in err[0]
    return err[0]


@pytest.mark.slow  # a whole evaluation in a child process
def test_python_dash_m_writes_the_spec_json(workspace, tmp_path):
    out = tmp_path / "result.json"
    # the vision path never imports the optional language-model packages: shadow them with
    # modules that fail on import (issue 26)
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    for name in ("transformers", "tokenizers", "datasets"):
        (shadow / f"{name}.py").write_text(f"raise ImportError('the vision path imported {name}')")
    paths = [str(shadow), str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    proc = subprocess.run(
        [sys.executable, "-m", "sde_core", "evaluate", str(workspace), "--json", str(out),
         *FAST, "--seed", "3", "--store", str(tmp_path / "store.sqlite"), "--quiet"],
        capture_output=True, text=True, timeout=240, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["settings"]["subset_size"] == 100 and doc["settings"]["seed"] == 3
    assert doc["settings"]["layer"] == "output" and doc["settings"]["sigma"] == "sqrt_dim"
    assert list(doc["models"]) == list(MODEL_NAMES)
    for name, row in doc["models"].items():
        assert set(row) >= SPEC_KEYS, (name, SPEC_KEYS - set(row))
        assert len(row["otr_ci"]) == 2 and isinstance(row["references_valid"], bool)
        assert row["sigma"] == pytest.approx(10**0.5)  # sqrt of the 10 softmax outputs
    roles = {name: row["role"] for name, row in doc["models"].items()}
    assert roles["original"] == "original" and roles["random"] == "random"


@pytest.mark.slow  # two whole evaluations
def test_same_seed_gives_identical_json(workspace, tmp_path, capsys):
    """Two runs with one seed agree byte for byte; another seed draws other subsets."""
    few = ["--models", "original,random", "--no-store", "--quiet"]
    paths = [tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"]
    for path, seed in zip(paths, ("0", "0", "1"), strict=True):
        argv = ["evaluate", str(workspace), "--json", str(path), *FAST, "--seed", seed, *few]
        assert main(argv) == 0
    assert paths[0].read_bytes() == paths[1].read_bytes()
    first, other = (json.loads(p.read_text()) for p in (paths[0], paths[2]))
    assert list(first["models"]) == ["original", "random"]
    assert first["models"]["original"]["reference_p"] != other["models"]["original"]["reference_p"]
    capsys.readouterr()


@pytest.mark.parametrize(
    ("extra", "text"),
    [
        (["--subset-size", "2000"], "subset size"),
        (["--sigma", "wide"], "--sigma"),
        (["--layer", "no_such_layer"], "no_such_layer"),
        (["--targets", "1"], "targets"),
        (["--splits", "0"], "splits"),
        (["--models", "original,ghost"], "ghost"),
    ],
)
def test_bad_settings_are_one_error_line(workspace, tmp_path, capsys, extra, text):
    code = main(["evaluate", str(workspace), "--json", str(tmp_path / "x.json"), "--no-store",
                 "--quiet", *extra])  # fmt: skip
    assert code != 0
    assert text in one_error_line(capsys)
    assert not (tmp_path / "x.json").exists()


def test_bad_workspaces_are_one_error_line(tmp_path, capsys):
    assert main(["evaluate", str(tmp_path / "missing"), "--quiet"]) != 0
    assert "workspace.toml" in one_error_line(capsys)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "workspace.toml").write_text("version = 1\n[dataset\n")
    assert main(["evaluate", str(broken), "--quiet"]) != 0
    assert "TOML" in one_error_line(capsys)
    no_data = tmp_path / "no-data"
    skip = shutil.ignore_patterns(".sde-cache", "results.sqlite*", "data.npz")
    shutil.copytree(default_demo_folder("mnist1d"), no_data, ignore=skip)
    assert main(["evaluate", str(no_data), "--quiet"]) != 0
    one_error_line(capsys)


def test_the_table_and_the_json_carry_each_models_verdict(workspace, tmp_path, capsys):
    """Each model's verdict words beside its numbers, the same as the report's (issue 40)."""
    from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
    from sde_core.pipeline.workspace_load import load_workspace
    from sde_core.viz.report.document import report_document

    out = tmp_path / "v.json"
    argv = ["evaluate", str(workspace), "--json", str(out), *FAST, "--seed", "0",
            "--models", "original,retrained", "--no-store"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    doc = json.loads(out.read_text())
    ws = load_workspace(workspace)
    settings = ws.defaults.with_overrides(  # FAST's design
        **FIXED, subset_size=100, targets=6, splits=20, baseline_targets=2, seed=0
    )
    report = report_document(evaluate_workspace(ws, settings, models=["original", "retrained"]))
    assert "verdicts:" in printed
    for name in ("original", "retrained"):
        entry = doc["models"][name]
        assert entry["verdict"] == report["models"][name]["verdict"]
        assert entry["verdict_sentence"] == report["models"][name]["summary"]["sentence"]
        line = next(x for x in printed.splitlines() if x.strip().startswith(f"{name}: "))
        assert entry["verdict"] in line and entry["verdict_sentence"] in line
