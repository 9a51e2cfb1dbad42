"""The scale benchmark of issue 39: hundreds of models evaluated on a local Ray instance, then
the pages loaded from the store they fill.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD .venv/bin/python bench/scale_bench.py \
        [--models 50 100 500] [--engine ray] [--submitit 50] [--out /tmp/sde-scale] \
        [--skip-evaluate] [--skip-pages] [--kill-resume 50]

For each N it builds a workspace of N **distinct** cheap models in ``--out/ws-N``: the mnist1d
demo's data and forget set, its original (with its training checkpoints and the shipped
checkpoint store, so the Curves view has a curve) and its retrained model, and N − 2
"unlearned" MLPs — one of the demo's unlearned checkpoints with Gaussian noise on every weight
(a relative scale set by the strength, a seed of its own: method × strength × seed), so every
model has its own activations and nothing is served from another model's cache. Then:

- ``python -m sde_core evaluate ws-N --engine ENGINE --quiet`` from an empty results store and
  an empty ``.sde-cache`` (the workspace's defaults), timed from the outside, with the peak
  memory of the whole process tree (the driver, Ray's processes and workers; sampled once
  a second from ``/proc``): RSS summed (a shared page once per process) and PSS summed (what the
  tree holds);
- the store's size;
- the original's training curve (``evaluate-checkpoints --model original``), so the Curves
  view has a stored curve to draw;
- the Compare, Report and Sweeps (Curves) pages' first load and a rerun, in a fresh process
  (:func:`time_pages`: each page as the first one a visitor opens on a server that did not
  warm up; the result read from the store), each page's first load after what ``serve.py``
  does at start (:func:`~sde_core.services.cascade.warm_workspace`, timed too), and that
  process's peak resident memory; once in the first process after the evaluation wrote the
  store (nothing in ``.sde-cache/checks.json``: it runs SQLite's structural check of the whole
  file and hashes every checkpoint, and records both) and once in a later one (the table).

``--submitit N`` evaluates the N-model workspace a second time, from scratch, through submitit's
local executor (``--engine submitit-local``: one child process per model, what a Slurm
cluster runs) for the same table row. ``--kill-resume N`` evaluates the N-model workspace
through that executor once more, kills its driver halfway and submits it again
(:func:`kill_and_resume`: what ran twice, if anything). Timing belongs here, never in the
tests; results go to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # ui_fixtures: the AppTest helpers the tests use

from helpers.many_models import sweep_grid  # noqa: E402

from sde_core.pipeline.store import workspace_store_path  # noqa: E402
from sde_core.pipeline.workspace_load import load_workspace  # noqa: E402
from sde_core.pipeline.workspace_write import write_workspace  # noqa: E402

DEMO = ROOT / "assets" / "demo-mnist1d"
#: strength (the entry's lr, helpers.many_models.SWEEP_STRENGTHS) → relative noise on every weight
NOISE_SCALE = {0.001: 0.005, 0.01: 0.02, 0.1: 0.05}
PAGES = {"Compare": "pages/compare.py", "Report": "pages/report.py",
         "Curves": "pages/sweeps.py"}  # fmt: skip


def build(n: int, out: Path) -> Path:
    """The workspace of ``n`` distinct models (no results); its folder."""
    from safetensors.torch import load_file, save_file

    folder = out / f"ws-{n}"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for name in ("data.npz", "forget.npy", "LICENSE-data.txt", "checkpoints.sqlite"):
        shutil.copy(DEMO / name, folder / name)
    shutil.copytree(DEMO / "models" / "original", folder / "models" / "original")
    demo = load_workspace(DEMO)
    retrained = demo.model("retrained")
    shutil.copy(demo.path(retrained.checkpoint), folder / "models" / "retrained.safetensors")
    entries = [demo.original(),
               dataclasses.replace(retrained, checkpoint="models/retrained.safetensors",
                                   checkpoints=[], init_checkpoint=None)]  # fmt: skip
    templates = [m for m in demo.models if m.role == "unlearned" and m.name != "unroll"]
    weights = {t.name: load_file(str(demo.path(t.checkpoint))) for t in templates}
    for i, (method, strength, seed, name) in enumerate(sweep_grid(n - 2)):
        template = templates[i % len(templates)]
        rng = np.random.default_rng([i, seed])
        noisy = {}
        for key, tensor in weights[template.name].items():
            if tensor.is_floating_point() and tensor.numel() > 1:
                scale = NOISE_SCALE[strength] * float(tensor.std())
                noise = rng.standard_normal(tuple(tensor.shape)).astype(np.float32) * scale
                tensor = tensor + tensor.new_tensor(noise)
            noisy[key] = tensor.contiguous()
        rel = f"models/{name}.safetensors"
        save_file(noisy, str(folder / rel))
        entries.append(dataclasses.replace(
            template, name=name, checkpoint=rel, method=method, seed=seed, sha256=None,
            checkpoints=[],
            hyperparameters={**template.hyperparameters, "lr": strength, "seed": seed},
        ))  # fmt: skip
    write_workspace(dataclasses.replace(demo, root=folder.resolve(), models=entries,
                                        name=f"scale-{n}"))  # fmt: skip
    return folder


def _tree_memory(root_pid: int) -> tuple[int, int]:
    """(RSS, PSS) bytes of ``root_pid`` and every descendant (from ``/proc``). RSS counts a
    page shared by several processes (torch's libraries in every worker) once per process;
    PSS divides it between them, so their sum is what the tree holds."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, grew = {root_pid}, True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grew = True
    rss = pss = 0
    for pid in tree:
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
        except OSError:
            continue
        for line in rollup:
            key, _, rest = line.partition(":")
            if key in ("Rss", "Pss"):
                value = int(rest.split()[0]) * 1024
                rss, pss = (rss + value, pss) if key == "Rss" else (rss, pss + value)
    return rss, pss


def _parallel(engine: str) -> list[str]:
    """submitit's local executor runs as many jobs at once as the machine has cores, as Ray
    does: the bench sets ``OMP_NUM_THREADS=1`` (one thread a worker), which the engine's default
    reads as one usable CPU for the driver too (one job at a time)."""
    return ["--max-running", str(os.cpu_count() or 1)] if engine == "submitit-local" else []


def _clear(folder: Path) -> None:
    """An empty results store and ``.sde-cache`` (activations, submitit's jobs) in ``folder``."""
    for stale in (folder / ".sde-cache", workspace_store_path(folder)):
        if stale.is_dir():
            shutil.rmtree(stale)
        elif stale.exists():
            stale.unlink()
    for suffix in ("-wal", "-shm"):
        Path(f"{workspace_store_path(folder)}{suffix}").unlink(missing_ok=True)


def evaluate(folder: Path, engine: str) -> tuple[float, float, float]:
    """(wall seconds, peak tree RSS GB, peak tree PSS GB) of a from-scratch ``evaluate`` of
    ``folder``."""
    _clear(folder)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "sde_core", "evaluate", str(folder), "--engine", engine,
         *_parallel(engine), "--quiet"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    peak = [0, 0]

    def sample() -> None:
        while child.poll() is None:
            peak[:] = [max(a, b) for a, b in zip(peak, _tree_memory(child.pid), strict=True)]
            time.sleep(1.0)  # smaps_rollup is not free: a sample a second

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = child.communicate()
    seconds = time.perf_counter() - t0
    sampler.join()
    if child.returncode != 0:
        raise SystemExit(f"evaluate failed ({child.returncode}): {err[-2000:]}")
    return seconds, peak[0] / 1e9, peak[1] / 1e9


def _store_state(folder: Path) -> tuple[dict[str, str], int]:
    """(every stored unit's finished time, the run's unit count so far) of ``folder``'s one
    evaluation run, read without verifying the units (a poll while the driver writes)."""
    from sde_core.pipeline.store import ResultsStore

    path = workspace_store_path(folder)
    if not path.exists():
        return {}, 0
    with ResultsStore(path, read_only=True) as store:
        runs = store.list_runs()
        if runs.empty:
            return {}, 0
        times = store.unit_times(int(runs["id"].iloc[0]))
    return times, len(times)


def kill_and_resume(folder: Path) -> dict[str, object]:
    """The acceptance run of issue 39 at scale: ``evaluate --engine submitit-local`` from an
    empty store, its driver SIGKILLed once half the models are stored (the jobs it submitted
    go on running, as on a cluster whose login node died), then the same command again.

    Returns what shows whether anything ran twice: the units stored at the kill, the jobs
    submitted by the first driver, how many of those the second driver submitted again (a
    new job id in the manifest), the job folders submitit made over both drivers (one a job,
    named by its id; not the ``%j`` folder of its file-name template), whether every
    unit stored before the kill kept its row (same ``finished`` time), and both wall times.
    """
    _clear(folder)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "sde_core", "evaluate", str(folder), "--engine",
            "submitit-local", *_parallel("submitit-local"), "--quiet"]  # fmt: skip
    jobs = folder / ".sde-cache" / "submitit"
    n = len(load_workspace(folder).models)
    t0 = time.perf_counter()
    first = subprocess.Popen(argv, env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    while first.poll() is None and _store_state(folder)[1] < n // 2:
        time.sleep(0.5)
    if first.poll() is not None:
        raise SystemExit("the first driver finished before half the models were stored")
    os.kill(first.pid, signal.SIGKILL)  # the driver dies; its submitted jobs go on running
    first.wait()
    first_s = time.perf_counter() - t0
    before, stored = _store_state(folder)
    submitted = json.loads((jobs / "manifest.json").read_text())
    t0 = time.perf_counter()
    second = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if second.returncode != 0:
        raise SystemExit(f"the resubmitted evaluate failed: {second.stderr[-2000:]}")
    after, total = _store_state(folder)
    manifest = json.loads((jobs / "manifest.json").read_text())
    again = sum(1 for key, entry in submitted.items()
                if manifest.get(key, {}).get("job_id") != entry["job_id"])  # fmt: skip
    return {
        "models": n, "stored_at_kill": stored, "submitted_by_first": len(submitted),
        "submitted_again": again, "units": total,
        "job_folders": sum(1 for p in jobs.iterdir() if p.is_dir() and p.name.isdigit()),
        "rows_kept": all(after.get(k) == v for k, v in before.items()),
        "first_s": round(first_s, 1), "second_s": round(time.perf_counter() - t0, 1),
    }  # fmt: skip


def store_curve(folder: Path) -> float:
    """Seconds of ``evaluate-checkpoints --model original`` (its training checkpoints, so the
    Curves view draws a stored curve; a point already stored is skipped)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "sde_core", "evaluate-checkpoints", str(folder),
                          "--model", "original"], env=env, capture_output=True, text=True,
                         check=False)  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"evaluate-checkpoints failed: {out.stderr[-2000:]}")
    return time.perf_counter() - t0


def time_pages(folder: Path, recorded: bool = True) -> dict[str, object]:
    """Each page's (first load, rerun) seconds on ``folder`` and this process's peak RSS (GB).

    Runs in a fresh process (``--time-pages``): one page run of the Method page first (the
    app's imports), then each page as the first one a visitor opens on a server that did not
    warm up — nothing verified and nothing cached in this process (the store's shared checks
    and the result cache forgotten first) — and a rerun. With ``recorded`` false the
    workspace's ``.sde-cache/checks.json`` is removed first: the first process after an
    evaluation wrote the store, which pays SQLite's structural check of the whole file and
    every checkpoint's SHA-256 and records them for the later processes (its first page pays
    them). Then each page's first load after
    :func:`~sde_core.services.cascade.warm_workspace` (what ``serve.py`` runs at start, timed:
    key ``"<page> warmed"``: (warm-up, first load) seconds), the checks and cache forgotten
    before each warm-up.
    """
    import resource

    from ui_fixtures import app_test, warm_server

    from sde_core.pipeline.store_verify import forget_shared_checks
    from sde_core.services.cascade import process_cache, warm_workspace

    os.environ["SDE_WORKSPACE"] = str(folder)
    os.environ["SDE_DATA_ROOTS"] = str(folder.parent)
    found: dict[str, object] = {}
    with warm_server():
        at = app_test(ROOT / "app.py", 600)
        at.switch_page("pages/method.py")
        at.run()
        if not recorded:  # the first process after the store or a checkpoint was written
            (folder / ".sde-cache" / "checks.json").unlink(missing_ok=True)
        for label, page in PAGES.items():
            forget_shared_checks()
            process_cache().clear()
            at = app_test(ROOT / "app.py", 600)
            at.switch_page(page)
            t0 = time.perf_counter()
            at.run()
            first = time.perf_counter() - t0
            assert not at.exception, [e.value for e in at.exception]
            t0 = time.perf_counter()
            at.run()
            found[label] = (first, time.perf_counter() - t0)
        for label, page in PAGES.items():  # what serve.py's warm-up leaves a first visitor
            forget_shared_checks()
            process_cache().clear()
            t0 = time.perf_counter()
            warm_workspace(str(folder))
            warmed = time.perf_counter() - t0
            at = app_test(ROOT / "app.py", 600)
            at.switch_page(page)
            t0 = time.perf_counter()
            at.run()
            assert not at.exception, [e.value for e in at.exception]
            found[f"{label} warmed"] = (warmed, time.perf_counter() - t0)
    found["rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    return found


def pages_in_child(folder: Path, recorded: bool = True) -> dict[str, object]:
    """:func:`time_pages` in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    flag = [] if recorded else ["--no-record"]
    out = subprocess.run([sys.executable, __file__, "--time-pages", str(folder), *flag],
                         env=env, capture_output=True, text=True, check=False)  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"page timing failed: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", type=int, nargs="+", default=[50, 100, 500])
    ap.add_argument("--engine", default="ray", choices=["ray", "local", "submitit-local"])
    ap.add_argument(
        "--submitit",
        type=int,
        nargs="*",
        default=[50],
        help="also evaluate these N through submitit's local executor",
    )
    ap.add_argument("--out", type=Path, default=Path("/tmp/sde-scale"))
    ap.add_argument(
        "--skip-evaluate",
        action="store_true",
        help="reuse the evaluated workspaces of an earlier run (pages only)",
    )
    ap.add_argument("--skip-pages", action="store_true")
    ap.add_argument(
        "--kill-resume",
        type=int,
        nargs="*",
        default=[],
        help="then evaluate these N through submitit's local executor, kill the driver once "
        "half the models are stored, resubmit, and count what ran twice",
    )
    ap.add_argument("--time-pages", type=Path, help=argparse.SUPPRESS)  # the child's job
    ap.add_argument("--no-record", action="store_true", help=argparse.SUPPRESS)  # the child's
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    if args.time_pages:
        print(json.dumps(time_pages(args.time_pages, recorded=not args.no_record)))
        return
    cols = [f"{p} first / rerun s" for p in PAGES]
    print(f"| models | engine | evaluate s | s a model | evaluate peak RSS / PSS GB | store MB | "
          f"{' | '.join(cols)} | pages peak RSS GB | load before → after |")  # fmt: skip
    print("|---|---|---|---|---|---|" + "---|" * len(cols) + "---|---|", flush=True)
    for n in args.models:
        folder = args.out / f"ws-{n}"
        before = _load()
        runs = []
        if not args.skip_evaluate:
            folder = build(n, args.out)
            if n in (args.submitit or []):
                runs.append(("submitit-local", *evaluate(folder, "submitit-local")))
            runs.append((args.engine, *evaluate(folder, args.engine)))
        size = workspace_store_path(folder).stat().st_size / 1e6
        pages, page_rss = ["–"] * len(PAGES), "–"
        if not args.skip_pages:
            print(f"N={n}: the original's curve stored in {store_curve(folder):.0f} s",
                  flush=True)  # fmt: skip
            first = pages_in_child(folder, recorded=False)  # records for the later ones
            timed = pages_in_child(folder)
            pages = [f"{timed[p][0]:.1f} / {timed[p][1]:.1f}" for p in PAGES]  # type: ignore[index]
            page_rss = f"{timed['rss_gb']:.2f}"
            warm = "; ".join(f"{p} {timed[f'{p} warmed'][1]:.1f} s (warm-up "  # type: ignore[index]
                             f"{timed[f'{p} warmed'][0]:.1f} s)" for p in PAGES)  # fmt: skip
            print(f"N={n}: first loads after serve.py's warm-up: {warm}", flush=True)
            fresh = ", ".join(f"{p} {first[p][0]:.1f} s" for p in PAGES)  # type: ignore[index]
            print(f"N={n}: first loads in the first process after the store was written "
                  f"(nothing in checks.json; the first page pays the checks): {fresh}",
                  flush=True)  # fmt: skip
        for engine, seconds, rss, pss in runs or [("(stored)", *[float("nan")] * 3)]:
            print(f"| {n} | {engine} | {seconds:.0f} | {seconds / n:.2f} | {rss:.2f} / {pss:.2f} | "
                  f"{size:.1f} | {' | '.join(pages)} | {page_rss} | {before} → {_load()} |",
                  flush=True)  # fmt: skip
    for n in args.kill_resume:
        folder = args.out / f"ws-{n}"
        if not (folder / "workspace.toml").exists():
            folder = build(n, args.out)
        print(f"kill and resume, N={n} (load {_load()}): "
              f"{json.dumps(kill_and_resume(folder))} (load after {_load()})",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
