"""Compare (and Report) page load from stored results at many models (issue 39, "pages that
stay fast").

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD .venv/bin/python bench/compare_scale_bench.py \
        [--models 50 100 500] [--profile 50] [--out /tmp/compare-scale] \
        [--pages compare report] [--reuse]

For each N it builds a synthetic workspace of N models in ``--out`` — the mnist1d demo's data
and forget set; the original, the retrained model and N − 2 "unlearned" entries (methods ×
strengths (lr) × seeds, each a copy of one of the demo's unlearned checkpoints) — and writes
their results into its results store **through the store API** (:meth:`ResultsStore.put_unit`):
each entry's rows and arrays are those of the demo's shipped run for the model it copies, renamed.
Then it times, on this machine:

- ``stored_result`` (the library's read-back of every model) and its summary read (the headline
  rows and draws only: what the page reads first at many models);
- the first load of each page of ``--pages`` (default: Compare) in a fresh AppTest (the app's
  navigation and the page, with the result read from the store: nothing is computed), and a
  rerun of the page (the process's result cache warm).

``--reuse`` times the workspaces already in ``--out`` (built by an earlier run) as they are.

``--profile N`` prints the 25 costliest functions (cumulative) of one page load at N models.
Timing belongs here, never in the tests; results go to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import os
import pstats
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # ui_fixtures: the AppTest helpers the tests use

from helpers.many_models import DEMO, copy_demo_data, store_copies, sweep_grid  # noqa: E402

from sde_core.inputs.data import load_dataset  # noqa: E402
from sde_core.pipeline.evaluation.workspace_run import stored_result  # noqa: E402
from sde_core.pipeline.store import ResultsStore, workspace_store_path  # noqa: E402
from sde_core.pipeline.workspace import workspace_hash  # noqa: E402
from sde_core.pipeline.workspace_load import load_workspace  # noqa: E402
from sde_core.pipeline.workspace_write import write_workspace  # noqa: E402


def build(n: int, out: Path) -> Path:
    """The synthetic workspace of ``n`` models with its stored run; its folder."""
    folder = out / f"ws-{n}"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    copy_demo_data(folder)
    demo = load_workspace(DEMO)
    ws = load_workspace(DEMO)
    ws = dataclasses.replace(ws, root=folder.resolve(), models=[], name=f"scale-{n}")
    templates = [m for m in demo.models if m.role == "unlearned" and m.name != "unroll"]
    (folder / "models").mkdir()
    copies: dict[str, str] = {}
    for entry in (demo.original(), demo.model("retrained")):
        target = folder / "models" / f"{entry.name}.safetensors"
        shutil.copy(demo.path(entry.checkpoint), target)
        ws.models.append(dataclasses.replace(entry, checkpoint=f"models/{entry.name}.safetensors",
                                             checkpoints=[], init_checkpoint=None))  # fmt: skip
        copies[entry.name] = entry.name
    for i, (method, strength, seed, name) in enumerate(sweep_grid(n - 2)):
        template = templates[i % len(templates)]
        rel = f"models/{name}.safetensors"
        shutil.copy(demo.path(template.checkpoint), folder / rel)
        ws.models.append(dataclasses.replace(
            template, name=name, checkpoint=rel, method=method, seed=seed, sha256=None,
            checkpoints=[],
            hyperparameters={**template.hyperparameters, "lr": strength, "seed": seed},
        ))  # fmt: skip
        copies[name] = template.name
    write_workspace(ws)
    t0 = time.perf_counter()
    store_copies(folder, copies, label=f"synthetic {n}")
    size = workspace_store_path(folder).stat().st_size / 1e6
    print(f"N={n}: wrote {len(copies)} units in {time.perf_counter() - t0:.1f} s, "
          f"store {size:.1f} MB", flush=True)  # fmt: skip
    return folder


def time_stored(folder: Path, summary: bool = False) -> float:
    """Seconds of the library's read-back of every model (``summary``: its headline rows and
    draws only, what the Compare page reads at many models), a new store connection each."""
    ws = load_workspace(folder)
    fingerprint = load_dataset(ws.dataset_spec()).fingerprint
    t0 = time.perf_counter()
    ws_hash = workspace_hash(ws, data_fingerprint=fingerprint)
    with ResultsStore(workspace_store_path(folder), read_only=True) as store:
        result = stored_result(store, ws_hash, ws.defaults, [m.name for m in ws.models],
                               summary=summary)  # fmt: skip
    assert result is not None and len(result.models) == len(ws.models)
    return time.perf_counter() - t0


#: The pages the bench can time: their script and a word of their title.
PAGES = {"compare": ("pages/compare.py", "Compare"), "report": ("pages/report.py", "Report")}


def time_page(folder: Path, profile: bool = False, page: str = "compare") -> tuple[float, float]:
    """(first load, rerun) seconds of a page of :data:`PAGES` on ``folder``."""
    import streamlit as st
    from streamlit.runtime.scriptrunner.script_runner import ScriptRunner
    from ui_fixtures import app_test, warm_server

    import sde_core.pipeline.store_verify as store_verify
    from sde_core.services.cascade import process_cache

    os.environ["SDE_WORKSPACE"] = str(folder)
    os.environ["SDE_DATA_ROOTS"] = str(folder.parent)
    # a cold server: the library reads above verified the store in this process, which every
    # later store object would trust (store_verify's shared verification); forget them, and
    # what an earlier page's load left in the process's caches
    store_verify.forget_shared_checks()
    process_cache().clear()
    st.cache_data.clear()
    st.cache_resource.clear()
    prof = cProfile.Profile() if profile else None
    real = ScriptRunner._run_script

    def profiled(self: ScriptRunner, rerun_data: object) -> None:  # in the script's thread
        assert prof is not None
        prof.enable()
        try:
            real(self, rerun_data)  # type: ignore[arg-type]
        finally:
            prof.disable()

    with warm_server():
        at = app_test(ROOT / "app.py", 600)
        script, title = PAGES[page]
        at.switch_page(script)
        t0 = time.perf_counter()
        if prof:
            ScriptRunner._run_script = profiled  # type: ignore[method-assign]
        try:
            at.run()
        finally:
            ScriptRunner._run_script = real  # type: ignore[method-assign]
        first = time.perf_counter() - t0
        assert not at.exception, [e.value for e in at.exception]
        assert any(title in t.value for t in at.title)
        t0 = time.perf_counter()
        at.run()
        rerun = time.perf_counter() - t0
    if prof:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(45)
    return first, rerun


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", type=int, nargs="+", default=[50, 100, 500])
    ap.add_argument("--profile", type=int, help="profile one page load at this many models")
    ap.add_argument("--out", type=Path, default=Path("/tmp/compare-scale"))
    ap.add_argument("--skip-page", action="store_true", help="time the library read only")
    ap.add_argument(
        "--pages",
        nargs="+",
        choices=list(PAGES),
        default=["compare"],
        help="the pages to time (default: compare)",
    )
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="time the workspaces already in --out instead of building them",
    )
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)

    def workspace(n: int) -> Path:
        return args.out / f"ws-{n}" if args.reuse else build(n, args.out)

    if args.profile:
        for page in args.pages:
            time_page(workspace(args.profile), profile=True, page=page)
        return
    named = [""] if args.pages == ["compare"] else [f"{p} " for p in args.pages]
    print("| models | store MB | stored_result s | summary read s | "
          + " | ".join(f"{p or 'page '}first load s | {p or 'page '}rerun s" for p in named)
          + " |")  # fmt: skip
    print("|---|---|---|---|" + "---|---|" * len(named))
    for n in args.models:
        folder = workspace(n)
        size = workspace_store_path(folder).stat().st_size / 1e6
        read, summary = time_stored(folder), time_stored(folder, summary=True)
        times = [(float("nan"),) * 2 if args.skip_page else time_page(folder, page=page)
                 for page in args.pages]  # fmt: skip
        shown = " | ".join(f"{first:.1f} | {rerun:.1f}" for first, rerun in times)
        print(f"| {n} | {size:.1f} | {read:.2f} | {summary:.2f} | {shown} |", flush=True)


if __name__ == "__main__":
    main()
