"""Dashboard actions at library level (method §12): how long each page action takes, cold and warm.

Every action goes through the calls the pages make — an
:class:`~sde_core.pipeline.evaluate.EvaluationSession` of the default demo and its
``stream`` / ``evaluate`` — with the activation cache warm (extracted once beforehand) and a
fresh, empty stage cache (``cold``) that the later actions then reuse (``warm``):

- **first evaluation** of one model at the defaults (Explore, first visit): first histogram
  (the first partial result, draw 1's references and targets, built into a
  :class:`~sde_core.pipeline.evaluate.ModelEvaluation`) and the page complete
  (:data:`~sde_core.pipeline.evaluate.EXPLORE_STAGES`);
- **σ change** (√d → median rule), **bins change** (30 → 20) and **α change** (0.01 → 0.05);
- **n 400 → 1000**;
- **Compare, first visit at a new σ**: nine models at ``output``
  (:data:`~sde_core.pipeline.evaluate.COMPARE_STAGES`), with the time each model finished;
- **Compare, second visit** (the same settings again);
- the **baselines** of one model (MMD and exact W2), which no page waits for.

It checks that the bins/α change computed no H group (stage-cache misses unchanged) and reports
the ratios "σ change / first evaluation" and "bins change / first evaluation" of the same model
(target ≤ 0.35 and ≤ 0.05). Times on a shared machine are noisy: the load average is recorded,
and the ratios within one run are the numbers to compare. Appends a section to
``bench/RESULTS.md`` (``--no-append`` to skip).

With ``--apptest`` (or ``--apptest-only``) it also runs each dashboard action once through
Streamlit's ``AppTest`` (the real pages, in this process): open Explore, σ change, bins change,
open Compare, Compare again, open Report — ``cold`` the first time in a fresh process (empty
``st.cache_resource``, empty stage cache: the workspace is copied without its ``.sde-cache``;
the activations are extracted on this first visit), ``warm`` when the same sequence is repeated
in a new browser session of the same process.

Usage: ``python bench/interactive_bench.py [--workspace assets/demo] [--model rl] [--no-append]
[--apptest | --apptest-only]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sde_core.pipeline.evaluate import (
    COMPARE_STAGES,
    EXPLORE_STAGES,
    EvalSettings,
    EvaluationSession,
)

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
#: Acceptance targets on an idle 2-core machine (seconds or ratios).
TARGETS = {
    "σ change: first histogram": 1.0,
    "σ change: page complete": 5.0,
    "bins change": 0.5,
    "α change": 0.5,
    "n 400 → 1000: first histogram": 3.0,
    "n 400 → 1000: page complete": 30.0,
    "Compare first visit, new σ (9 models)": 30.0,
    "Compare second visit": 1.0,
}


def explore(session: EvaluationSession, model: str, settings: EvalSettings) -> tuple[float, float]:
    """(first histogram, page complete) seconds of one model on the Explore page."""
    t0 = time.perf_counter()
    first = float("nan")
    for part in session.stream([model], settings, stages=EXPLORE_STAGES):
        if first != first:  # the first partial: draw the histogram
            part.evaluation()
            first = time.perf_counter() - t0
        if part.complete:
            part.evaluation()
    return first, time.perf_counter() - t0


def compare(
    session: EvaluationSession, models: Sequence[str], settings: EvalSettings
) -> tuple[float, list[float]]:
    """(total seconds, seconds at which each model finished) of the Compare page."""
    t0 = time.perf_counter()
    finished: list[float] = []

    def on_update(part) -> None:  # type: ignore[no-untyped-def]
        if part.complete:
            finished.append(time.perf_counter() - t0)

    session.evaluate(models, settings, stages=COMPARE_STAGES, on_update=on_update)
    return time.perf_counter() - t0, finished


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


#: The dashboard actions of :func:`apptest_actions`, in order.
APP_ACTIONS = ("open Explore", "σ change (median rule)", "bins change (→ 20)", "open Compare",
               "open Report")  # fmt: skip


def apptest_actions(workspace: str, model: str) -> list[tuple[str, str, float]]:
    """Each dashboard action through ``AppTest``, cold then warm: ``(action, cache, seconds)``.

    The workspace is copied (without ``.sde-cache``) so that the cold pass starts from nothing.
    """
    import shutil

    from streamlit.testing.v1 import AppTest

    app = Path(__file__).resolve().parents[1] / "app.py"
    rows: list[tuple[str, str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / Path(workspace).name
        skip = shutil.ignore_patterns(".sde-cache", "*.sqlite-wal", "*.sqlite-shm")
        shutil.copytree(workspace, folder, ignore=skip)
        os.environ["SDE_WORKSPACE"] = str(folder)
        os.environ["SDE_DATA_ROOTS"] = str(folder.parent)
        for cache in ("cold", "warm"):
            at = AppTest.from_file(str(app), default_timeout=3600)
            at.query_params["model"] = model
            steps: list[Callable[[], object]] = [
                at.run,
                lambda at=at: at.radio(key="w_s_sigma_rule").set_value("median rule").run(),
                lambda at=at: at.number_input(key="w_s_bins").set_value(20).run(),
                lambda at=at: at.switch_page("pages/compare.py").run(),
                lambda at=at: at.switch_page("pages/report.py").run(),
            ]
            for name, step in zip(APP_ACTIONS, steps, strict=True):
                seconds = timed(step)
                if at.exception:
                    raise RuntimeError(f"{name}: {[e.value for e in at.exception]}")
                rows.append((f"AppTest: {name}", cache, seconds))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workspace", default="assets/demo")
    p.add_argument("--model", default="rl", help="the model of the Explore actions")
    p.add_argument("--no-append", action="store_true")
    p.add_argument("--apptest", action="store_true", help="also time the pages (AppTest)")
    p.add_argument("--apptest-only", action="store_true", help="only time the pages (AppTest)")
    args = p.parse_args()
    if args.apptest_only:
        rows = apptest_actions(args.workspace, args.model)
        text = "\n".join(
            [f"## Dashboard actions through AppTest — {dt.datetime.now():%Y-%m-%d %H:%M}", "",
             f"`bench/interactive_bench.py --apptest-only`, {args.workspace}, model "
             f"`{args.model}`; load average {os.getloadavg()[0]:.1f}.", "",
             "| action | cache | seconds |", "|---|---|---|"]
            + [f"| {n} | {c} | {s:.2f} |" for n, c, s in rows] + [""]
        )  # fmt: skip
        print(text)
        if not args.no_append:
            with RESULTS.open("a", encoding="utf-8") as fh:
                fh.write("\n" + text)
        return

    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as stages:
        session = EvaluationSession(args.workspace, stage_dir=stages)
        base = session.defaults()
        names = [m.name for m in session.workspace.models]
        for name in names:  # warm activation cache and in-memory activations: not measured
            session.inputs(name, base)
        rows: list[tuple[str, str, float]] = []
        first_hist, first_full = explore(session, args.model, base)
        rows += [("first evaluation: first histogram", "cold", first_hist),
                 ("first evaluation: page complete", "cold", first_full)]  # fmt: skip
        sigma = base.with_overrides(sigma="median")
        hist, full = explore(session, args.model, sigma)
        rows += [
            ("σ change: first histogram", "cold", hist),
            ("σ change: page complete", "cold", full),
        ]
        misses = sum(session.cache.misses.values())
        bins = timed(lambda: explore(session, args.model, sigma.with_overrides(bins=20)))
        alpha = timed(lambda: explore(session, args.model, sigma.with_overrides(alpha=0.05)))
        no_hsic = sum(session.cache.misses.values()) == misses
        rows += [("bins change", "warm", bins), ("α change", "warm", alpha)]
        big = base.with_overrides(subset_size=1000)
        hist, full = explore(session, args.model, big)
        rows += [("n 400 → 1000: first histogram", "cold", hist),
                 ("n 400 → 1000: page complete", "cold", full)]  # fmt: skip
        new_sigma = base.with_overrides(sigma=2.0)
        total, per_model = compare(session, names, new_sigma)
        rows.append(("Compare first visit, new σ (9 models)", "cold", total))
        again, _ = compare(session, names, new_sigma)
        rows.append(("Compare second visit", "warm", again))
        t0 = time.perf_counter()
        session.evaluate([args.model], base, stages=("references", "controls", "mmd", "w2"))
        rows.append(("baselines of one model (MMD + exact W2, n = 400)", "cold",
                     time.perf_counter() - t0))  # fmt: skip
    if args.apptest:
        rows += apptest_actions(args.workspace, args.model)
    load_end = os.getloadavg()[0]
    ratios = {
        "σ change / first evaluation": rows[3][2] / first_full,
        "bins change / first evaluation": bins / first_full,
    }
    lines = [
        f"## Interactive actions — {dt.datetime.now():%Y-%m-%d %H:%M}",
        "",
        f"`bench/interactive_bench.py`, {args.workspace}, model `{args.model}` for the Explore "
        f"actions; {platform.machine()}, {os.cpu_count()} cores, load average "
        f"{load_start:.1f} at the start and {load_end:.1f} at the end (a shared machine: compare "
        "the ratios, absolute times will be re-measured on an idle machine). Defaults: layer "
        f"output, n = {base.subset_size}, T = {base.targets}, K = {base.splits}, "
        f"R = {base.panel_size}, B = {base.draws} draws. Activation cache warm; stage cache empty "
        "at the start ('cold' = its stages were not cached).",
        "",
        "| action | cache | seconds | target (idle 2-core) |",
        "|---|---|---|---|",
    ]
    for name, cache, seconds in rows:
        target = TARGETS.get(name)
        lines.append(
            f"| {name} | {cache} | {seconds:.2f} | {'' if target is None else f'≤ {target:g}'} |"
        )
    lines += [
        "",
        "| ratio (same model, one run) | value | target |",
        "|---|---|---|",
        f"| σ change / first evaluation | {ratios['σ change / first evaluation']:.3f} | ≤ 0.35 |",
        f"| bins change / first evaluation | {ratios['bins change / first evaluation']:.3f} | "
        "≤ 0.05 |",
        "",
        f"bins and α changes computed no H group: {'yes' if no_hsic else 'NO'}. Compare, first "
        "visit: models finished at " + ", ".join(f"{t:.1f}" for t in per_model) + " s.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_append:
        with RESULTS.open("a", encoding="utf-8") as fh:
            fh.write("\n" + text)


if __name__ == "__main__":
    main()
