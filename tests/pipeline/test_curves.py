"""Checkpoint curves (sde_core.pipeline.curves): the best-checkpoint rule against hand-made
tables, the shipped mnist1d curve read back from its two stores without computing, the shipped
sweep files' checks, and ``unlearn --save-every`` with a resumable ``evaluate-checkpoints``."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import sde_core.pipeline.evaluation.workspace_run as workspace_run
from sde_core.cli import main
from sde_core.errors import DataError, SettingsError
from sde_core.inputs.data import load_dataset
from sde_core.pipeline.curves import (
    CHECKPOINT_STORE,
    CURVE_COLUMNS,
    best_checkpoint,
    checkpoint_store_path,
    curve_models,
    curve_steps,
    curve_table,
    forecast_seconds,
    retrained_reference,
)
from sde_core.pipeline.evaluation.metric_table import ACC_GAP, CALIBRATED_OTR, OTR
from sde_core.pipeline.store import ResultsStore, workspace_store_path
from sde_core.pipeline.sweeps import read_sweep, shipped_sweeps
from sde_core.pipeline.workspace import workspace_hash
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.viz.figures.sweeps import before_gate, paired_sweep_answer, shipped_sweep_answer
from sde_core.viz.ui_support import Eta

ROOT = Path(__file__).resolve().parents[2]
MNIST1D = ROOT / "assets" / "demo-mnist1d"
EDM = ROOT / "assets" / "demo-fashion-edm"


def _rows(*points: tuple[str, float, float, str, bool]) -> pd.DataFrame:
    """A curve table of (point, step, calibrated OTR, conflict, stored) rows of one model."""
    rows = []
    for point, step, cal, conflict, stored in points:
        row = dict.fromkeys(CURVE_COLUMNS, math.nan)
        row.update(model="m", role="unlearned", step=step, fraction=step / 10, point=point,
                   stored=stored, evidence_conflict=conflict, inconclusive_reason="")  # fmt: skip
        row[CALIBRATED_OTR.key] = cal
        rows.append(row)
    return pd.DataFrame(rows, columns=list(CURVE_COLUMNS))


def test_best_checkpoint_is_the_first_within_w_with_consistent_behaviour():
    table = _rows(
        ("start", 0, 0.80, "", True),  # the start is never a checkpoint of the run
        ("checkpoint", 2, 0.20, "", True),  # too far from 0.8
        ("checkpoint", 4, math.nan, "", True),  # withheld
        ("checkpoint", 6, 0.75, "accuracy gap 12 pts", True),  # conflicting evidence
        ("checkpoint", 7, 0.85, "", False),  # not stored
        ("checkpoint", 8, 0.72, "", True),  # |0.72 - 0.8| <= 0.1: the first that qualifies
        ("final", 10, 0.80, "", True),
    )
    best = best_checkpoint(table, "m", 0.8, 0.1)
    assert best is not None and (best.step, best.calibrated_otr) == (8, 0.72)
    assert best_checkpoint(table, "m", 0.8, 0.05).step == 10  # type: ignore[union-attr]
    assert best_checkpoint(table, "m", 0.0, 0.1) is None  # nothing qualifies: none is named
    assert best_checkpoint(table.iloc[::-1], "m", 0.8, 0.1).step == 8  # type: ignore[union-attr]
    with pytest.raises(SettingsError, match="positive"):
        best_checkpoint(table, "m", 0.8, 0)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("curves") / "demo-mnist1d"
    skip = shutil.ignore_patterns(".sde-cache", "*.sqlite-wal", "*.sqlite-shm")
    shutil.copytree(MNIST1D, folder, ignore=skip)
    return folder


def test_shipped_curve_is_read_from_both_stores_without_computing(demo, monkeypatch):
    def refuse(*_a, **_k):
        raise AssertionError("the curve must be read, not computed")

    monkeypatch.setattr(workspace_run, "evaluate_workspace", refuse)
    ws = load_workspace(demo)
    assert {m.name for m in curve_models(ws)} == {"original", "ft"}
    steps = curve_steps(ws, "ft")
    assert [s.step for s in steps] == [0, 2, 4, 6, 8, 10]
    assert [s.point for s in steps] == ["start", *["checkpoint"] * 4, "final"]
    fp = load_dataset(ws.dataset_spec()).fingerprint
    settings = ws.defaults
    with (
        ResultsStore(workspace_store_path(demo), read_only=True) as rs,
        ResultsStore(checkpoint_store_path(demo), read_only=True) as cs,
    ):
        table = curve_table(ws, settings, ["ft", "original"], results_store=rs,
                            checkpoint_store=cs, data_fingerprint=fp)  # fmt: skip
        reference = retrained_reference(ws, settings, rs, fp)
        main_run = int(rs.list_runs(workspace_hash(ws, data_fingerprint=fp))["id"].iloc[0])
        shipped = {r["name"]: r for r in rs.records(main_run, "models")}
        ckpt = {}
        for step in steps[1:-1]:
            runs = cs.list_runs(workspace_hash(step.workspace, data_fingerprint=fp))
            assert len(runs) == 1
            (row,) = cs.records(int(runs["id"].iloc[0]), "models")
            ckpt[step.step] = row
    assert table["stored"].all(), table[~table["stored"]]
    ft = table[table["model"] == "ft"].set_index("step")
    for key in (OTR.key, CALIBRATED_OTR.key, ACC_GAP.key):  # the rows as stored, unchanged
        assert ft.loc[0, key] == pytest.approx(shipped["original"][key])
        assert ft.loc[10, key] == pytest.approx(shipped["ft"][key])
        for step, row in ckpt.items():
            assert ft.loc[step, key] == pytest.approx(row[key])
    original = table[table["model"] == "original"]
    assert list(original["step"]) == [0, 10, 20, 40, 80, 100]  # training epochs
    assert reference == ("retrained", pytest.approx(shipped["retrained"][CALIBRATED_OTR.key]))
    # FT on this demo does not forget: the behaviour agrees, so no checkpoint is named best
    assert best_checkpoint(table, "ft", reference[1], 0.1) is None
    assert (ft[ACC_GAP.key] > 20).all() and not ft["evidence_conflict"].astype(bool).any()
    assert forecast_seconds(table) == (0, 0.0)
    assert (demo / CHECKPOINT_STORE).stat().st_size < 512 * 1024  # the shipped rows only


def test_a_changed_setting_is_not_stored_and_is_forecast(demo):
    ws = load_workspace(demo)
    settings = ws.defaults.with_overrides(subset_size=200)
    with (
        ResultsStore(workspace_store_path(demo), read_only=True) as rs,
        ResultsStore(checkpoint_store_path(demo), read_only=True) as cs,
    ):
        table = curve_table(ws, settings, ["ft"], results_store=rs, checkpoint_store=cs)
    assert not table["stored"].any() and table[OTR.key].isna().all()
    count, seconds = forecast_seconds(table)
    assert count == 4 and seconds is None  # no stored final: the time is unknown, not guessed


def test_shipped_sweep_file_reads_and_says_no_verdict():
    (path,) = shipped_sweeps(EDM)
    sweep = read_sweep(path)
    assert len(sweep) == 80 and sweep["from_store"].all()
    text = shipped_sweep_answer(sweep)
    assert text.startswith("No verdict at any point: every headline number is withheld at all 80")
    raw = before_gate(sweep)
    assert raw[OTR.key].tolist() == sweep[f"{OTR.key}_raw"].tolist()
    assert (raw["inconclusive_reason"] == "").all()


def test_paired_sweep_answer_counts_each_way_and_names_what_holds_for_all_at_once():
    nan = float("nan")
    rows = [  # value, model, f1_vs_base, lo, hi, all_lo, all_hi
        ("16", "a", nan, nan, nan, nan, nan),  # the base
        ("4", "a", 0.12, 0.02, 0.22, -0.05, 0.29),  # above alone, not with all
        ("8", "a", -0.10, -0.18, -0.02, -0.21, 0.01),  # below alone
        ("32", "a", 0.01, -0.06, 0.08, -0.10, 0.12),  # undecided
        ("16", "b", nan, nan, nan, nan, nan),
        ("4", "b", 0.30, 0.20, 0.40, 0.12, 0.48),  # above, with all too
        ("8", "b", nan, nan, nan, nan, nan),  # withheld
        ("32", "b", 0.00, -0.05, 0.05, -0.08, 0.08),
    ]
    cols = ["value", "model", "f1_vs_base", "f1_vs_base_lo", "f1_vs_base_hi",
            "f1_vs_base_all_lo", "f1_vs_base_all_hi"]  # fmt: skip
    sweep = pd.DataFrame(rows, columns=cols).assign(paired_base=16.0)
    assert paired_sweep_answer(sweep) == (
        "Against 16, on the same subsets and splits (the paired F1 difference, method §15): "
        "a: no point differs from 16 with all 3 compared points taken together; point by "
        "point, above at 1, below at 1, undecided at 1 (the largest gain +0.12 [+0.02, +0.22] "
        "at 4, [−0.05, +0.29] taken together); b: 4 above 16 even with all 2 compared points "
        "taken together; point by point, above at 1, below at 0, undecided at 1 (the largest "
        "gain +0.30 [+0.20, +0.40] at 4, [+0.12, +0.48] taken together)."
    )
    assert paired_sweep_answer(sweep.drop(columns=["f1_vs_base_all_hi"])) is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("param,value,model\nsigma,1,a\n", "lacks the column"),
        ("param,value,model,otr\nbogus,1,a,0.5\n", "must sweep exactly one of"),
        ("param,value,otr\nsigma,1,0.5\n", "lacks the column(s) model"),
        ("", "not a readable CSV"),
    ],
)
def test_bad_sweep_files_are_named_with_the_fix(tmp_path, content, message):
    path = tmp_path / "bad_sweep.csv"
    path.write_text(content)
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_sweep(path)


def test_eta_from_the_top_level_stage():
    now = [0.0]
    eta = Eta(clock=lambda: now[0])
    eta.update("checkpoints", 0, 4)
    assert eta.text() == ""
    now[0] = 30.0
    eta.update("ft @ 2: draws", 5, 10)  # an inner stage does not move the estimate
    eta.update("checkpoints", 1, 4)
    assert eta.text() == "1 of 4 done, about 90 s left"


@pytest.fixture
def small(tmp_path: Path) -> Path:
    """A small mnist1d workspace with a trained original and its retrained copy (CLI)."""
    folder = tmp_path / "ws"
    arch = ["--arch", "mlp", "--arch-kwarg", "input_dim=40", "--arch-kwarg", "hidden=[32]",
            "--arch-kwarg", "num_classes=10"]  # fmt: skip
    assert main(["workspace", "init", str(folder), "--dataset-kind", "mnist1d",
                 "--dataset-root", "data/mnist1d.npz", "--dataset-option", "num_samples=1000",
                 "--random-forget", "0.2", "--name", "small"]) == 0  # fmt: skip
    assert main(["train", str(folder), "--name", "original", *arch, "--epochs", "3",
                 "--checkpoint-fractions", "1.0"]) == 0  # fmt: skip
    assert main(["unlearn", str(folder), "--method", "retrain", "--name", "retrained"]) == 0
    return folder


def test_save_every_is_refused_where_there_are_no_epochs(tmp_path, capsys):
    rng = np.random.default_rng(0)
    folder = tmp_path / "tiny"
    folder.mkdir()
    np.savez(folder / "data.npz", x_train=rng.normal(size=(60, 4)).astype(np.float32),
             y_train=rng.integers(0, 3, 60), x_test=rng.normal(size=(20, 4)).astype(np.float32),
             y_test=rng.integers(0, 3, 20))  # fmt: skip
    assert main(["workspace", "init", str(folder), "--dataset-kind", "npz", "--dataset-root",
                 "data.npz", "--random-forget", "0.2"]) == 0  # fmt: skip
    assert main(["train", str(folder), "--name", "original", "--arch", "mlp", "--arch-kwarg",
                 "input_dim=4", "--arch-kwarg", "hidden=[8]", "--arch-kwarg", "num_classes=3",
                 "--epochs", "2"]) == 0  # fmt: skip
    capsys.readouterr()
    code = main(["unlearn", str(folder), "--method", "unroll", "--name", "u", "--save-every", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and err[-1].startswith("error: --save-every") and "'unroll'" in err[-1]
    assert not any("Traceback" in line for line in err)
    assert main(["unlearn", str(folder), "--method", "ft", "--name", "x", "--save-every", "0"]) == 1
    assert "--save-every" in capsys.readouterr().err
    assert [m.name for m in load_workspace(folder).models] == ["original"]  # nothing added


@pytest.mark.slow  # trains, unlearns and evaluates three checkpoints (~25 s on 2 busy cores)
def test_unlearn_save_every_then_evaluate_checkpoints_resumes(small, capsys):
    argv = ["unlearn", str(small), "--method", "ft", "--name", "ft", "--save-every", "1",
            "--param", "epochs=3"]  # fmt: skip
    assert main(argv) == 0
    ws = load_workspace(small)
    refs = ws.model("ft").checkpoints
    assert [round(r.fraction, 6) for r in refs] == [round(1 / 3, 6), round(2 / 3, 6)]
    assert all(ws.path(r.path).is_file() for r in refs)
    flags = ["--subset-size", "40", "--targets", "8", "--splits", "20", "--panel-size", "20",
             "--null-pairs", "4", "--baseline-targets", "0", "--precision", "0", "--draws",
             "2"]  # fmt: skip
    assert main(["evaluate", str(small), "--quiet", *flags]) == 0
    capsys.readouterr()
    assert main(["evaluate-checkpoints", str(small), "--model", "ft", *flags]) == 0
    first = capsys.readouterr()
    assert "2 checkpoint point(s) to evaluate: forecast ~" in first.err
    with ResultsStore(workspace_store_path(small), read_only=True) as rs:
        settings = ws.defaults.with_overrides(subset_size=40, targets=8, splits=20, panel_size=20,
                                              null_pairs=4, baseline_targets=0, precision=0.0,
                                              draws=2)  # fmt: skip
        fp = load_dataset(ws.dataset_spec()).fingerprint
        reference = retrained_reference(ws, settings, rs, fp)
    if reference is None:  # the gate withholds the retrained model's number at these sizes
        assert "no best checkpoint: the retrained model's calibrated OTR" in first.out
    else:
        assert "best checkpoint of ft:" in first.out
    assert "not stored at these settings" not in first.out  # start and end are in the store
    assert main(["evaluate-checkpoints", str(small), "--model", "ft", *flags]) == 0
    again = capsys.readouterr()
    assert "0 checkpoint point(s) to evaluate" in again.err  # resumed: nothing recomputed
    with ResultsStore(checkpoint_store_path(small), read_only=True) as cs:
        assert len(cs.list_runs()) == 2
    lines = [line for line in first.out.splitlines() if line.startswith("ft ")]
    assert [line.split()[2] for line in lines] == ["start", "checkpoint", "checkpoint", "final"]
