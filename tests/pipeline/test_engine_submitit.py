"""The Slurm engine through submitit, tested on the local executor submitit ships.

The local executor runs every job as a child process through the same submission, pickling and
result files as ``sbatch``; only the scheduler differs. A driver killed halfway and started
again must finish without running a finished job twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sde_core.errors import EngineError
from sde_core.pipeline.engine import Job, LocalEngine

pytest.importorskip("submitit")

from sde_core.pipeline.engine_submitit import SubmititEngine, job_fingerprint

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import _engine_jobs as jobs  # noqa: E402


@pytest.fixture
def child_path(monkeypatch):
    """Child processes import the job functions from this folder and sde_core from the tree."""
    old = os.environ.get("PYTHONPATH")
    tree = str(HERE.parent.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), tree, old])))


def small_graph() -> list[Job]:
    squares = [Job(f"sq{i}", jobs.square, {"x": i}) for i in range(3)]
    return [*squares, Job("sum", jobs.total, {"offset": 1}, deps=("sq0", "sq1", "sq2"))]


def test_submitit_local_matches_the_local_engine(child_path, tmp_path):
    seen: list[str] = []
    engine = SubmititEngine(tmp_path / "jobs", cluster="local", poll_s=0.05)
    out = engine.run(small_graph(), on_result=lambda job, value: seen.append(job.key))
    assert out == LocalEngine().run(small_graph()) == {"sq0": 0, "sq1": 1, "sq2": 4, "sum": 6}
    assert sorted(seen) == ["sq0", "sq1", "sq2", "sum"]  # each result reached the driver once
    assert len(list((tmp_path / "jobs").glob("*/*_result.pkl"))) == 4  # four real child jobs
    # done jobs are skipped: nothing is submitted again
    again = SubmititEngine(tmp_path / "jobs", cluster="local", poll_s=0.05)
    seen.clear()
    assert again.run(small_graph(), done=out, on_result=lambda j, v: seen.append(j.key)) == out
    assert seen == []


def test_submitit_local_keeps_only_what_a_job_needs_when_asked(child_path, tmp_path):
    from test_engine import released_graph_check

    released_graph_check(SubmititEngine(tmp_path / "jobs", cluster="local", poll_s=0.05))


def test_a_failing_job_is_named_and_finished_results_are_kept(child_path, tmp_path):
    kept: dict[str, int] = {}
    graph = [Job("ok", jobs.square, {"x": 3}), Job("bad", jobs.fails, {"message": "boom"},
                                                 deps=("ok",))]  # fmt: skip
    engine = SubmititEngine(tmp_path / "jobs", cluster="local", poll_s=0.05)
    with pytest.raises(EngineError, match=r"job 'bad' failed on local .*boom.*re-run"):
        engine.run(graph, on_result=lambda job, value: kept.__setitem__(job.key, value))
    assert kept == {"ok": 9}


def test_bad_options_are_clear_errors(tmp_path):
    with pytest.raises(EngineError, match="unknown submitit cluster"):
        SubmititEngine(tmp_path, cluster="pbs")
    with pytest.raises(EngineError, match="positive minutes"):
        SubmititEngine(tmp_path, time_min=0)
    with pytest.raises(EngineError, match="gpus must be non-negative"):
        SubmititEngine(tmp_path, gpus=-1)


def test_at_most_max_running_jobs_run_at_once(child_path, tmp_path):
    """The local executor runs every submitted job at once on this machine: the engine keeps
    at most ``max_running`` submitted and unfinished (by default the usable CPUs)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    graph = [Job(f"t{i}", jobs.timed, {"log_dir": str(logs), "name": f"t{i}", "seconds": 0.4})
             for i in range(4)]  # fmt: skip
    engine = SubmititEngine(tmp_path / "jobs", cluster="local", poll_s=0.05, max_running=2)
    assert engine.run(graph) == {f"t{i}": f"t{i}" for i in range(4)}
    spans = [tuple(map(float, (logs / f"t{i}").read_text().split())) for i in range(4)]
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    assert peak <= 2, spans  # never three at once
    assert SubmititEngine(tmp_path, cluster="local").max_running >= 1  # the usable CPUs
    assert SubmititEngine(tmp_path, cluster="slurm").max_running is None  # the scheduler queues
    with pytest.raises(EngineError, match="max_running must be at least 1"):
        SubmititEngine(tmp_path, cluster="local", max_running=0)


def test_the_fingerprint_follows_the_arguments():
    a = Job("k", jobs.square, {"x": 1})
    assert job_fingerprint(a) == job_fingerprint(Job("k", jobs.square, {"x": 1}))
    assert job_fingerprint(a) != job_fingerprint(Job("k", jobs.square, {"x": 2}))
    assert job_fingerprint(a) != job_fingerprint(Job("k", jobs.total, {"x": 1}))


DRIVER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    sys.path.insert(0, {here!r})
    import _engine_jobs as jobs
    from sde_core.pipeline.engine import Job
    from sde_core.pipeline.engine_submitit import SubmititEngine

    store = Path({store!r})
    done = json.loads(store.read_text()) if store.exists() else {{}}
    graph = [Job(f"j{{i}}", jobs.counted, {{"counter_dir": {counters!r}, "name": f"j{{i}}",
             "seconds": 1.0 + 1.5 * i, "value": i}}) for i in range(4)]

    def persist(job, value):  # the driver's results store: one write per finished job
        done[job.key] = value
        store.write_text(json.dumps(done))

    SubmititEngine({folder!r}, cluster="local", poll_s=0.05).run(graph, done=done,
                                                                on_result=persist)
    """
)


def test_a_killed_driver_resumes_without_recomputing_finished_jobs(child_path, tmp_path):
    counters = tmp_path / "counters"
    counters.mkdir()
    store = tmp_path / "store.json"
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(here=str(HERE), store=str(store), counters=str(counters),
                                    folder=str(tmp_path / "jobs")))  # fmt: skip
    first = subprocess.Popen([sys.executable, str(script)], start_new_session=True)
    deadline = time.monotonic() + 120
    while not store.exists() and time.monotonic() < deadline:  # wait for the first result
        time.sleep(0.05)
    assert store.exists(), "the first driver stored no result"
    os.kill(first.pid, signal.SIGKILL)  # the driver dies; its submitted jobs go on running
    first.wait()
    stored_before = set(json.loads(store.read_text()))
    assert stored_before and len(stored_before) < 4  # killed halfway
    second = subprocess.run([sys.executable, str(script)], timeout=180)
    assert second.returncode == 0
    final = json.loads(store.read_text())
    assert final == {f"j{i}": 10 * i for i in range(4)}
    runs = {p.name: len(p.read_text().splitlines()) for p in counters.iterdir()}
    assert runs == {f"j{i}": 1 for i in range(4)}  # every job ran exactly once


# A Table 1 cell small enough for a test: one training job and two evaluation jobs.
SMALL_PLAN = [
    "dataset.options.num_samples=1000",
    "params.seeds=[0]",
    "params.forget_ratios=[0.2]",
    "params.subset_sizes=[48]",
    'params.layers=["output", "penultimate"]',
    "train.epochs=3",
    "eval.splits=20",
    "eval.targets=6",
]


@pytest.mark.slow  # a real plan (train + two evaluations), each job a child process, run twice
def test_run_plan_under_submitit_killed_and_resubmitted(child_path, tmp_path):

    from sde_core.pipeline.store import ResultsStore

    out = tmp_path / "run"
    argv = [sys.executable, "-m", "sde_core", "run-plan", "table1", "--out", str(out),
            "--engine", "submitit-local", "--quiet"]  # fmt: skip
    for item in SMALL_PLAN:
        argv += ["--override", item]
    manifest = out / "submitit" / "manifest.json"
    first = subprocess.Popen(argv, start_new_session=True)
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and first.poll() is None:
        if manifest.exists() and len(json.loads(manifest.read_text() or "{}")) == 3:
            break  # trained, stored, and both evaluations submitted
        time.sleep(0.1)
    assert first.poll() is None, "the plan finished before it could be killed"
    os.kill(first.pid, signal.SIGKILL)  # halfway: the evaluations are running
    first.wait()
    submitted = json.loads(manifest.read_text())
    second = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "1 read from the store" in second.stdout  # the training unit
    assert json.loads(manifest.read_text()) == submitted  # nothing was submitted again
    job_dirs = [p for p in (out / "submitit").iterdir() if p.is_dir() and p.name.isdigit()]
    assert len(job_dirs) == 3  # three jobs ever ran
    with ResultsStore(out / "results.sqlite") as store:
        run = store.get_run(1)
        assert run.status == "complete"
        assert len(store.finished_units(1)) == 3
        assert len(store.records(1, "points")) == 2  # one point per layer


def test_the_command_line_builds_the_engine_it_names(tmp_path):
    import argparse

    from sde_core.cli._args import add_engine_arguments, engine_from_args
    from sde_core.errors import SDEError

    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    args = parser.parse_args(["--executor", "slurm", "--partition", "gpu", "--time-min", "90",
                              "--gpus", "1", "--slurm-option", "slurm_account=lab"])  # fmt: skip
    engine = engine_from_args(args, tmp_path / "default")
    assert isinstance(engine, SubmititEngine)
    assert (engine.cluster, engine.partition, engine.time_min, engine.gpus) == ("slurm", "gpu",
                                                                               90, 1)  # fmt: skip
    assert engine.folder == tmp_path / "default" and engine.extra == {"slurm_account": "lab"}
    args = parser.parse_args(["--engine", "submitit-local", "--jobs-folder", str(tmp_path / "j")])
    engine = engine_from_args(args, tmp_path / "default")
    assert engine.cluster == "local" and engine.folder == tmp_path / "j"
    args = parser.parse_args(["--engine", "submitit-local", "--max-running", "3"])
    assert engine_from_args(args, tmp_path / "default").max_running == 3
    with pytest.raises(SDEError, match="--address only applies"):
        engine_from_args(parser.parse_args(["--engine", "slurm", "--address", "auto"]), tmp_path)
    with pytest.raises(SDEError, match="must look like key=value"):
        engine_from_args(parser.parse_args(["--engine", "slurm", "--slurm-option", "x"]), tmp_path)
