"""What "reproduced" means (method §13): identical, equivalent within the near-ties, or differs —
and a report verified as another machine would verify it."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.designs import REPORT_FLAGS

from sde_core.cli import main
from sde_core.common.paths import ROOTS_ENV
from sde_core.pipeline.demo_recipes import default_demo_folder
from sde_core.pipeline.evaluation.near_ties import ModelNearTies
from sde_core.pipeline.reproduce import compare_model, worst_outcome

ROOT = Path(__file__).resolve().parents[2]

#: Another CPU, emulated: torch's portable kernels instead of the AVX ones, numba's generic
#: target instead of this CPU's.
OTHER_MACHINE = {"ATEN_CPU_CAPABILITY": "default", "NUMBA_CPU_NAME": "generic"}
SMALL = REPORT_FLAGS  # the two evaluations of two models in seconds


def _ties(**kw) -> ModelNearTies:
    base = {
        "targets": 0,
        "targets_total": 100,
        "controls": 0,
        "controls_total": 100,
        "gates": (),
        "reference_p_range": (0.001, 0.001),
        "panel_p_range": (1e-6, 1e-6),
        "dependence_tolerance": 1e-4,
        "classic": {"acc_r": 0.0, "acc_f": 0.0, "acc_te": 0.0, "asr": 0.0},
    }
    base.update(kw)
    return ModelNearTies(**base)


ENTRY = {
    "role": "unlearned",
    "draws": 5,
    "otr": 0.62,
    "otr_ci": [0.4, 0.8],
    "verdict_counts": {"in-training": 30, "out-of-training": 62},
    "references_valid": True,
    "reference_p": 0.001,
    "dependence_score": 0.5,
    "asr": 0.89,
    "verdict": "partly forgotten",
    "seconds": 3.0,
}


def _moved(**changes):
    return {**ENTRY, **changes}


def test_the_same_numbers_are_identical_whatever_the_times():
    c = compare_model(ENTRY, _moved(seconds=99.0), [_ties()])
    assert c.outcome == "identical" and c.differences == []


def test_a_text_column_a_store_lacks_is_no_text_but_a_said_one_differs():
    """A store written before a text column existed (``behaviour_measure``, issue 35) reads it
    as missing; a recomputation that says nothing there (``""``) is the same result."""
    assert compare_model(ENTRY, _moved(behaviour_measure=""), [_ties()]).outcome == "identical"
    said = compare_model(ENTRY, _moved(behaviour_measure="answer NLL"), [_ties()])
    assert said.outcome == "differs"
    assert [d.field for d in said.differences] == ["behaviour_measure"]


def test_a_withheld_interval_is_the_same_whether_null_or_a_pair_of_nulls():
    """A report read back from the results store writes a withheld interval as ``null``; the
    recomputation has ``[null, null]``. Neither holds a number: the same result (the shipped
    mnist1d demo's report failed `verify` on every model for this alone). A number on one side
    still differs."""
    withheld = _moved(attack_auc_ci=None, loss_gap_vs_retrained_ci=None)
    pair = _moved(attack_auc_ci=[None, None], loss_gap_vs_retrained_ci=[None, None])
    assert compare_model(withheld, pair, [_ties()], report=True).outcome == "identical"
    one_number = compare_model(withheld, _moved(attack_auc_ci=[0.4, None]), [_ties()], report=True)
    assert one_number.outcome == "differs"
    assert [d.field for d in one_number.differences] == ["attack_auc_ci"]


def test_a_number_within_its_conditioning_is_equivalent_beyond_it_differs():
    c = compare_model(ENTRY, _moved(dependence_score=0.50004), [_ties()])
    assert c.outcome == "equivalent"
    assert "conditioning" in c.differences[0].reason
    far = compare_model(ENTRY, _moved(dependence_score=0.51), [_ties()])
    assert far.outcome == "differs" and far.differences[0].field == "dependence_score"


def test_a_rate_moves_only_by_the_near_ties_it_contains():
    # One target of a 20-target draw flipped: OTR moves by 1/20 per draw.
    moved = _moved(otr=0.63, verdict_counts={"in-training": 29, "out-of-training": 63})
    assert compare_model(ENTRY, moved, [_ties()]).outcome == "differs"
    eq = compare_model(ENTRY, moved, [_ties(targets=1)])
    assert eq.outcome == "equivalent"
    assert {d.field for d in eq.differences} == {"otr", "verdict_counts"}
    too_far = _moved(otr=0.72)
    assert compare_model(ENTRY, too_far, [_ties(targets=1)]).outcome == "differs"


def test_an_attack_decision_on_the_boundary_is_explained_by_its_near_ties():
    moved = _moved(asr=0.8908333333333334)  # one of 1,200 decisions flipped
    rows = {"asr": 1200}
    assert compare_model(ENTRY, moved, [_ties()], rows).outcome == "differs"
    tie = _ties(classic={"acc_r": 0.0, "acc_f": 0.0, "acc_te": 0.0, "asr": 4.0})
    c = compare_model(ENTRY, moved, [tie, _ties(classic={"asr": float("nan")})], rows)
    assert c.outcome == "equivalent" and "4 near-tie decisions of 1200" in c.lines()[0]


def test_a_gate_or_verdict_change_needs_a_near_tie_gate():
    flipped = _moved(references_valid=False, otr=None, verdict="inconclusive")
    assert compare_model(ENTRY, flipped, [_ties()]).outcome == "differs"
    gate = _ties(gates=("draw 2: reference test p = 0.0099 (α = 0.01) may be 0.0098–0.0101",))
    assert compare_model(ENTRY, flipped, [gate]).outcome == "equivalent"


def test_each_draws_p_value_moves_within_its_own_draws_range():
    ties = _ties(reference_p_draws=((0.0513, 0.0516), (0.97, 0.97)))
    entry = {**ENTRY, "reference_p_draws": [0.05137, 0.97]}
    inside = {**ENTRY, "reference_p_draws": [0.05146, 0.97]}
    assert compare_model(entry, inside, [ties]).outcome == "equivalent"
    outside = {**ENTRY, "reference_p_draws": [0.05137, 0.9701]}
    assert compare_model(entry, outside, [ties]).outcome == "differs"


def test_a_non_finite_reported_number_is_never_within_a_range():
    """Issue 31: a p-value forged to NaN (or inf) is a difference, however wide the near-tie
    ranges, and so is a withheld (null) one against a number when no gate is a near-tie."""
    ties = _ties(reference_p_draws=((0.0, 1.0), (0.0, 1.0)))
    entry = {**ENTRY, "reference_p_draws": [0.05, 0.97]}
    for bad in (math.nan, math.inf, -math.inf):
        forged = {**entry, "reference_p_draws": [bad, 0.97]}
        c = compare_model(forged, entry, [ties], report=True)
        assert c.outcome == "differs", bad
        assert "non-finite" in c.differences[0].reason
        # rows of a models table hold NaN (withheld) and ±inf (unbounded Fieller side): against
        # a number they still differ, against the same value they are identical
        assert compare_model(forged, entry, [ties]).outcome == "differs", bad
        assert compare_model(forged, dict(forged), [ties]).outcome == "identical", bad
    withheld = {**entry, "reference_p_draws": [None, 0.97]}
    assert compare_model(withheld, entry, [ties], report=True).outcome == "differs"
    assert compare_model({**ENTRY, "draws": math.nan}, ENTRY, report=True).outcome == "differs"


def test_what_was_evaluated_must_match_exactly():
    c = compare_model(ENTRY, _moved(role="original", draws=4), [_ties(targets=50)])
    assert c.outcome == "differs"
    assert {d.field for d in c.differences} == {"role", "draws"}


def test_the_worst_outcome_wins():
    assert worst_outcome([]) == "identical"
    assert worst_outcome(["identical", "equivalent"]) == "equivalent"
    assert worst_outcome(["equivalent", "differs", "identical"]) == "differs"


def _copy_demo(dataset: str, target: Path) -> Path:
    ignore = shutil.ignore_patterns(".sde-cache", "*.sqlite-wal", "*.sqlite-shm")
    return Path(shutil.copytree(default_demo_folder(dataset), target, ignore=ignore))


def _verify(report: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sde_core", "verify", str(report), "--quiet"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        timeout=600,
    )


@pytest.mark.parametrize("dataset", ["mnist1d"])
@pytest.mark.slow  # recomputes a demo on a generic CPU in a child process
def test_a_report_verifies_on_another_cpu_and_a_changed_byte_differs(
    dataset, tmp_path, capsys, monkeypatch
):
    """Report with this machine's native kernels, verify on an emulated other CPU: identical or
    equivalent (exit 0), never differs; one changed checkpoint byte: differs (exit 1), naming
    the file."""
    monkeypatch.setenv(ROOTS_ENV, str(tmp_path))  # verify opens the report's folder only there
    ws = _copy_demo(dataset, tmp_path / "ws")
    out = tmp_path / "out"
    args = ["report", str(ws), "--out", str(out), "--models", "rl,random", "--no-pdf", *SMALL]
    assert main([*args, "--no-store", "--quiet"]) == 0
    report = next(out.glob("*.json"))
    document = json.loads(report.read_text())
    assert {"targets", "gates", "classic", "total"} <= set(document["models"]["rl"]["near_ties"])

    other = _verify(report, OTHER_MACHINE)
    assert other.returncode == 0, other.stdout + other.stderr
    last = other.stdout.strip().splitlines()[-1]
    assert last.startswith(("identical", "equivalent")), other.stdout
    assert "DIFFERS" not in other.stdout

    checkpoint = ws / "models" / "rl.safetensors"
    blob = bytearray(checkpoint.read_bytes())
    blob[-1] ^= 0x01
    checkpoint.write_bytes(bytes(blob))
    assert main(["verify", str(report), "--quiet"]) == 1  # the tamper check is exact anywhere
    tampered = capsys.readouterr().out
    assert "file hash differs: models/rl.safetensors" in tampered
    assert "rl: DIFFERS" in tampered and "random: DIFFERS" not in tampered


def test_the_gpu_kernel_reproduces_the_cpu_engine(tiny_workspace, tmp_path, monkeypatch):
    """A GPU's HSIC stage (the torch kernel with its float32 gathers, run here on the CPU)
    gives an evaluation identical or equivalent to the numba engine's under method §13, for
    a trained model and the random-init one (flat activations, the harder case)."""
    import sde_core.pipeline.evaluation.stages as stages
    from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
    from sde_core.pipeline.workspace_load import load_workspace
    from sde_core.stats.hsic import split_half_batch_stats

    ws = load_workspace(tiny_workspace)
    names = [m.name for m in ws.models if m.role in ("original", "random")]
    common = {"models": names, "cache_dir": tmp_path / "acts", "stage_dir": False}
    cpu = evaluate_workspace(ws, ws.defaults, **common)
    calls: list[str] = []

    def torch_kernel(*args, **kwargs):
        calls.append(kwargs.get("device"))
        return split_half_batch_stats(*args, **{**kwargs, "device": "cpu", "backend": "torch"})

    monkeypatch.setattr(stages, "split_half_batch_stats", torch_kernel)
    gpu = evaluate_workspace(ws, ws.defaults, **common)
    assert calls  # the torch kernel ran the HSIC stage
    for name in names:
        a = cpu.models[cpu.models["name"] == name].iloc[0].to_dict()
        b = gpu.models[gpu.models["name"] == name].iloc[0].to_dict()
        comparison = compare_model(a, b, [cpu.near_ties(name), gpu.near_ties(name)])
        assert comparison.outcome in ("identical", "equivalent"), "\n".join(comparison.lines())
        h_cpu, h_gpu = cpu.model_arrays(name)["targets_h"], gpu.model_arrays(name)["targets_h"]
        assert not (h_cpu == h_gpu).all()  # other arithmetic: not a copy of the CPU numbers
