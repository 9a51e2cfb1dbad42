"""Execution engines: job graphs, the local engine, and a real local Ray instance."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
from helpers.designs import fixed_settings

from sde_core.errors import EngineError
from sde_core.pipeline.engine import (
    RELEASED,
    Job,
    LocalEngine,
    RayEngine,
    Resources,
    make_engine,
    topological_order,
)

sys.path.insert(0, str(Path(__file__).parent))
import _engine_jobs as jobs


def graph() -> list[Job]:
    squares = [Job(f"sq{i}", jobs.square, {"x": i}) for i in range(8)]
    return [
        Job("sum", jobs.total, {"offset": 1}, deps=tuple(j.key for j in squares)),
        *squares,
        Job("sum2", jobs.total, {}, deps=("sum", "sq7")),
    ]


EXPECTED = {**{f"sq{i}": i * i for i in range(8)}, "sum": 141, "sum2": 141 + 49}


def test_topological_order_and_graph_errors():
    order = [j.key for j in topological_order(graph())]
    assert order.index("sum") > max(order.index(f"sq{i}") for i in range(8))
    assert order.index("sum2") > order.index("sum")
    with pytest.raises(EngineError, match="duplicate job key"):
        topological_order([Job("a", jobs.square, {"x": 1}), Job("a", jobs.square, {"x": 2})])
    with pytest.raises(EngineError, match="unknown jobs"):
        topological_order([Job("a", jobs.total, deps=("nope",))])
    with pytest.raises(EngineError, match="cycle"):
        topological_order([Job("a", jobs.total, deps=("b",)), Job("b", jobs.total, deps=("a",))])
    with pytest.raises(EngineError, match="non-negative"):
        Resources(cpus=-1)
    with pytest.raises(EngineError, match="unknown engine"):
        make_engine("spark")


def test_local_engine_runs_in_order_and_skips_done():
    seen: list[str] = []
    out = LocalEngine().run(graph(), on_result=lambda job, value: seen.append(job.key))
    assert out == EXPECTED and sorted(seen) == sorted(EXPECTED)
    seen.clear()
    done = {k: v for k, v in EXPECTED.items() if k.startswith("sq")}
    out = LocalEngine().run(graph(), done=done, on_result=lambda job, value: seen.append(job.key))
    assert out == EXPECTED and seen == ["sum", "sum2"]  # finished jobs are not re-run


def released_graph_check(engine) -> None:
    """``keep=False``: every result reaches on_result; only those a job depends on are kept
    (the graph's sums still get their inputs), the others come back as RELEASED."""
    seen: dict[str, int] = {}
    out = engine.run(graph(), on_result=lambda job, value: seen.__setitem__(job.key, value),
                     keep=False)  # fmt: skip
    assert seen == EXPECTED  # every result, once, with its value
    needed = {f"sq{i}" for i in range(8)} | {"sum"}  # the sums' inputs
    assert {k: v for k, v in out.items() if k in needed} == {k: EXPECTED[k] for k in needed}
    assert out["sum2"] is RELEASED  # nothing depends on it: not kept


def test_local_engine_keeps_only_what_a_job_needs_when_asked():
    released_graph_check(LocalEngine())


def test_unreachable_cluster_is_a_clear_error():
    pytest.importorskip("ray")
    import ray

    if ray.is_initialized():
        pytest.skip("a Ray instance is already connected in this process")
    with pytest.raises(EngineError, match="cannot reach the Ray cluster"):
        RayEngine("ray://127.0.0.1:1").run([Job("a", jobs.square, {"x": 1})])


@pytest.fixture(scope="module")
def ray_engine():
    pytest.importorskip("ray")
    import os

    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parent), old]))
    engine = RayEngine(num_cpus=2, max_retries=2)
    yield engine
    RayEngine.shutdown()
    if old is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = old


def test_ray_engine_matches_local_engine(ray_engine):
    calls: list[str] = []
    out = ray_engine.run(graph(), on_result=lambda job, value: calls.append(job.key))
    assert out == LocalEngine().run(graph()) == EXPECTED
    assert sorted(calls) == sorted(EXPECTED)  # the driver saw each result exactly once
    released_graph_check(ray_engine)


def test_ray_engine_keeps_at_most_max_in_flight_tasks(ray_engine, tmp_path):
    """Every task's arguments sit in Ray's object store until it ends: the engine submits at
    most ``max_in_flight`` at once (two workers here, one task in flight: never two)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    graph = [Job(f"t{i}", jobs.timed, {"log_dir": str(logs), "name": f"t{i}", "seconds": 0.3})
             for i in range(4)]  # fmt: skip
    engine = RayEngine(num_cpus=2, max_in_flight=1)
    assert engine.run(graph) == {f"t{i}": f"t{i}" for i in range(4)}
    spans = sorted(tuple(map(float, (logs / f"t{i}").read_text().split())) for i in range(4))
    assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(spans)), spans
    with pytest.raises(EngineError, match="max_in_flight must be at least 1"):
        RayEngine(max_in_flight=0)


def test_ray_engine_retries_a_worker_that_died(ray_engine, tmp_path):
    marker = tmp_path / "died"
    graph_ = [Job(f"j{i}", jobs.square, {"x": i}) for i in range(4)]
    graph_.append(Job("flaky", jobs.dies_once, {"marker": str(marker), "value": 21}))
    calls: list[str] = []
    out = ray_engine.run(graph_, on_result=lambda job, value: calls.append(job.key))
    assert marker.exists()  # the worker really died once
    assert out["flaky"] == 42 and out["j3"] == 9
    assert sorted(calls) == sorted(j.key for j in graph_)  # complete, no duplicates


def test_ray_engine_reports_a_failing_job_and_keeps_finished_results(ray_engine):
    kept: dict[str, int] = {}
    graph_ = [
        Job("ok", jobs.square, {"x": 3}),
        Job("bad", jobs.fails, {"message": "boom"}, deps=("ok",)),
    ]
    with pytest.raises(EngineError, match=r"job 'bad' raised ValueError: boom"):
        ray_engine.run(graph_, on_result=lambda job, value: kept.__setitem__(job.key, value))
    assert kept == {"ok": 9}


@pytest.fixture(scope="module")
def tiny_workspace(tmp_path_factory) -> Path:
    """A workspace with an original, a random and a fine-tuned model (built with the CLI)."""
    import numpy as np

    from sde_core.cli import main

    root = tmp_path_factory.mktemp("engine_ws")
    rng = np.random.default_rng(0)
    np.savez(
        root / "data.npz",
        x_train=rng.normal(size=(160, 4)).astype(np.float32),
        y_train=rng.integers(0, 3, 160),
        x_test=rng.normal(size=(120, 4)).astype(np.float32),
        y_test=rng.integers(0, 3, 120),
    )
    ws = root  # data.npz lies inside the workspace folder (the path policy)
    mlp = ["--arch", "mlp", "--arch-kwarg", "input_dim=4", "--arch-kwarg", "hidden=[16]",
           "--arch-kwarg", "num_classes=3"]  # fmt: skip
    assert main(["workspace", "init", str(ws), "--dataset-kind", "npz", "--dataset-root",
                 str(root / "data.npz"), "--random-forget", "0.25"]) == 0  # fmt: skip
    assert main(["train", str(ws), "--name", "original", *mlp, "--epochs", "3"]) == 0
    assert main(["train", str(ws), "--name", "rand", "--role", "random", *mlp]) == 0
    return ws


@pytest.mark.slow  # starts a Ray cluster
def test_evaluation_rows_identical_on_both_engines(ray_engine, tiny_workspace, tmp_path):
    from sde_core.cli import main
    from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
    from sde_core.pipeline.store import ResultsStore

    # Unlearning as a Ray job: the driver alone writes workspace.toml.
    argv = ["unlearn", str(tiny_workspace), "--method", "ft", "--name", "ft",
            "--param", "epochs=1", "--engine", "ray"]  # fmt: skip
    assert main(argv) == 0
    settings = fixed_settings(subset_size=16, targets=6, splits=20, panel_size=20, null_pairs=4,
                            baseline_targets=4)  # fmt: skip
    rows = {}
    for name, engine in (("local", LocalEngine()), ("ray", ray_engine)):
        with ResultsStore(tmp_path / f"{name}.sqlite") as store:
            result = evaluate_workspace(tiny_workspace, settings, store=store, engine=engine)
            rows[name] = (store.records(result.run_id, "models"),
                          store.records(result.run_id, "subsets"))  # fmt: skip

    def models(records):  # engine-independent content (timing aside), in a canonical order
        return sorted(
            ({k: v for k, v in r.items() if k != "eval_seconds"} for r in records),
            key=lambda r: r["name"],
        )

    def subsets(records):
        return sorted(records, key=lambda r: (r["model"], r["kind"], r["index"]))

    assert models(rows["local"][0]) == models(rows["ray"][0])
    assert subsets(rows["local"][1]) == subsets(rows["ray"][1])
    assert sorted(r["name"] for r in rows["ray"][0]) == ["ft", "original", "rand"]


# A Table 1 cell small enough for a test (600 train / 400 test mnist1d samples, R = 20%).
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


class KillOnceEngine(RayEngine):
    """A Ray engine whose first evaluation job kills its worker once (fault injection)."""

    def __init__(self, marker: Path, **kwargs) -> None:
        super().__init__(**kwargs)
        self.marker = marker

    def run(self, jobs, **kwargs):
        import dataclasses
        import functools

        victim = next(j for j in jobs if j.key.startswith("eval/"))
        wrapped = functools.partial(jobs_mod().kill_once_then, victim.fn, str(self.marker))
        jobs = [dataclasses.replace(j, fn=wrapped) if j is victim else j for j in jobs]
        return super().run(jobs, **kwargs)


def jobs_mod():
    return jobs


@pytest.mark.slow  # starts a Ray cluster and kills a worker
def test_plan_on_ray_matches_local_and_survives_a_killed_worker(ray_engine, tmp_path):
    from sde_core.pipeline.plans.driver import run_plan
    from sde_core.pipeline.plans.spec import load_plan
    from sde_core.pipeline.store import ResultsStore

    variant = load_plan("table1").variant("default", SMALL_PLAN)
    records = {}
    for name, engine in (
        ("local", LocalEngine()),
        ("ray", KillOnceEngine(tmp_path / "died", max_retries=2)),
    ):
        with ResultsStore(tmp_path / f"{name}.sqlite") as store:
            report = run_plan(variant, tmp_path / f"work-{name}", store, progress=False,
                              engine=engine)  # fmt: skip
            assert report.skipped == [] and len(report.ran) == report.jobs
            assert store.get_run(report.run_id).status == "complete"
            records[name] = {
                t: sorted(
                    (
                        {k: v for k, v in r.items() if not k.endswith("seconds")}
                        for r in store.records(report.run_id, t)
                    ),
                    key=repr,
                )
                for t in ("points", "models")
            }
            units = store.finished_units(report.run_id)
            assert len(units) == report.jobs  # every job exactly once, none duplicated
    assert (tmp_path / "died").exists()  # a worker really died and its task was retried
    for table in ("points", "models"):
        for a, b in zip(records["local"][table], records["ray"][table], strict=True):
            diff = {k: (a[k], b.get(k)) for k in a if a[k] != b.get(k) and a[k] == a[k]}
            assert diff == {}, table
    assert len(records["ray"]["points"]) == 2  # two layers of one cell
