"""The bundled demos in one table: one call builds any of them, one result type reports it.

:data:`DEMOS` maps each ``demo build --dataset`` name to its :class:`Demo`: the folder under
``assets/`` and a builder with the one signature :data:`DemoBuilder`, returning a
:class:`DemoResult` (what was built, the lines to show, whether the demo's acceptance checks
passed). The builders are thin adapters over the demos' own modules, which hold the recipes:
:func:`sde_core.pipeline.demo.build_demo` (Fashion-MNIST and mnist1d classifiers, method §11),
:func:`sde_core.pipeline.demo_diffusion.build_diffusion_demo` (an EDM denoiser, method §14) and
:func:`sde_core.pipeline.llm_demo.build_facts_demo` (a small GPT-2 on fictitious facts). Adding
a demo: its module, one adapter here and one line in :data:`DEMOS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sde_core.errors import SettingsError
from sde_core.pipeline.demo_diffusion import DIFFUSION_DEMOS, write_fig6_sweep
from sde_core.pipeline.demo_recipes import DEMO_DATASETS, DEMO_FOLDERS
from sde_core.pipeline.llm_demo import FACTS_DATASET, default_facts_folder
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.workspace import Workspace

__all__ = [
    "DEMOS",
    "Demo",
    "DemoBuilder",
    "DemoResult",
    "build_named_demo",
    "redo_demo_sweep",
    "refill_demo_store",
]


@dataclass(frozen=True)
class DemoResult:
    """What building a demo did.

    Attributes:
        folder: the workspace folder. workspace_hash: its content hash.
        total_seconds: the whole build. store: the results store (None without one).
        summary: the lines the command line prints after the build.
        passed: the demo's acceptance checks passed (True for a demo without checks).
        report: the builder's own report (a ``BuildReport`` or ``FactsReport``).
    """

    folder: Path
    workspace_hash: str
    total_seconds: float
    store: Path | None
    summary: tuple[str, ...] = ()
    passed: bool = True
    report: Any = field(default=None, compare=False, repr=False)


#: ``builder(name, out, seed=, source=, store=, log=)``: ``out`` None builds in the demo's
#: folder under ``assets/``; ``source`` is the raw data folder where the demo has one.
DemoBuilder = Callable[..., DemoResult]


#: ``defaults(name, seed)``: the evaluation ``[defaults]`` the demo's recipe pins.
DemoDefaults = Callable[[str, int], EvalSettings]


@dataclass(frozen=True)
class Demo:
    """One bundled demo: its ``--dataset`` name, folder under ``assets/``, builder and the
    ``[defaults]`` its recipe pins."""

    name: str
    folder: str
    build: DemoBuilder
    defaults: DemoDefaults


def _built_line(report: Any) -> str:
    return (
        f"built {report.folder}: {len(report.built)} model(s) produced, "
        f"{len(report.skipped)} reused, workspace hash {report.workspace_hash[:16]}, "
        f"{report.total_seconds:.1f}s in all"
    )


def _classifier_demo(
    name: str,
    out: str | Path | None,
    *,
    seed: int = 0,
    source: str | Path | None = None,
    store: bool = True,
    log: Callable[[str], None] | None = None,
) -> DemoResult:
    """The Fashion-MNIST or mnist1d classifier demo, with its method §11 acceptance checks."""
    from sde_core.pipeline.demo import build_demo
    from sde_core.pipeline.demo_recipes import acceptance_checks, default_demo_folder, demo_recipe
    from sde_core.pipeline.store import ResultsStore

    folder = Path(out) if out else default_demo_folder(name)
    report = build_demo(demo_recipe(name, seed=seed), folder, source=source, store=store, log=log)
    lines = [_built_line(report)]
    passed = True
    if report.store is not None:
        with ResultsStore(report.store) as st:
            run_id = int(st.list_runs()["id"].iloc[-1])
            checks = acceptance_checks(st.rows(run_id, "models"))
        lines += [str(check) for check in checks]
        passed = all(check.passed for check in checks)
    return DemoResult(
        report.folder, report.workspace_hash, report.total_seconds, report.store,
        tuple(lines), passed, report,
    )  # fmt: skip


def _diffusion_demo(
    name: str,
    out: str | Path | None,
    *,
    seed: int = 0,
    source: str | Path | None = None,
    store: bool = True,
    log: Callable[[str], None] | None = None,
) -> DemoResult:
    """The diffusion demo, with its denoising-loss table."""
    from sde_core.pipeline.demo_diffusion import (
        DIFFUSION_DEMOS,
        build_diffusion_demo,
        default_diffusion_folder,
        diffusion_recipe,
    )

    folder = Path(out) if out else default_diffusion_folder(name)
    report, rows = build_diffusion_demo(
        diffusion_recipe(name, seed=seed), folder, source=source, store=store,
        copy_samples=DIFFUSION_DEMOS[name].copy_samples, log=log,
    )  # fmt: skip
    lines = [
        _built_line(report),
        "denoising loss D_f / D_r / D_te, gap = (D_te − D_f) / D_te; paired with the "
        "retrained model on D_f and on D_te (± standard error):",
        *(
            f"  {r.model:<13} σ_t={r.noise_level:<5g} {r.forget:.5f} / {r.retain:.5f} / "
            f"{r.test:.5f}  gap {r.gap:+.4f}  paired D_f {r.paired_forget:+.4f} "
            f"± {r.paired_forget_se:.4f}, D_te {r.paired_test:+.4f} "
            f"± {r.paired_test_se:.4f}"
            for r in rows
        ),
    ]
    return DemoResult(
        report.folder, report.workspace_hash, report.total_seconds, report.store, tuple(lines),
        report=(report, rows),
    )  # fmt: skip


def _facts_demo(
    name: str,
    out: str | Path | None,
    *,
    seed: int = 0,
    source: str | Path | None = None,
    store: bool = True,
    log: Callable[[str], None] | None = None,
) -> DemoResult:
    """The language-model demo (its corpus is generated: ``source`` is not used)."""
    from sde_core.pipeline.llm_demo import FactsRecipe, build_facts_demo

    report = build_facts_demo(
        Path(out) if out else default_facts_folder(), FactsRecipe(seed=seed), store=store, log=log
    )
    line = (
        f"built {report.folder} in {report.total_seconds:.0f}s ("
        + ", ".join(f"{k} {v:.0f}s" for k, v in report.seconds.items())
        + f"); workspace hash {report.workspace_hash[:16]}"
    )
    return DemoResult(
        report.folder, report.workspace_hash, report.total_seconds, report.store, (line,),
        report=report,
    )  # fmt: skip


def _classifier_defaults(name: str, seed: int) -> EvalSettings:
    from sde_core.pipeline.demo_recipes import demo_recipe

    return demo_recipe(name, seed=seed).defaults


def _diffusion_defaults(name: str, seed: int) -> EvalSettings:
    from sde_core.pipeline.demo_diffusion import diffusion_recipe

    return diffusion_recipe(name, seed=seed).defaults


def _facts_defaults(_name: str, seed: int) -> EvalSettings:
    from sde_core.pipeline.llm_demo import FactsRecipe

    return FactsRecipe(seed=seed).defaults


#: Every bundled demo by its ``demo build --dataset`` name; the first is the default demo.
DEMOS: dict[str, Demo] = {
    **{
        name: Demo(name, DEMO_FOLDERS[name], _classifier_demo, _classifier_defaults)
        for name in DEMO_DATASETS
    },
    **{
        name: Demo(name, spec.folder, _diffusion_demo, _diffusion_defaults)
        for name, spec in DIFFUSION_DEMOS.items()
    },
    FACTS_DATASET: Demo(FACTS_DATASET, default_facts_folder().name, _facts_demo, _facts_defaults),
}


def build_named_demo(
    name: str,
    out: str | Path | None = None,
    *,
    seed: int = 0,
    source: str | Path | None = None,
    store: bool = True,
    log: Callable[[str], None] | None = None,
) -> DemoResult:
    """Build (or finish building) the demo called ``name`` (a key of :data:`DEMOS`).

    Raises:
        SettingsError: no demo has that name (the message lists them).
        SDEError: the demo's own errors (missing source data, an invalid result).
    """
    demo = DEMOS.get(name)
    if demo is None:
        raise SettingsError(f"no demo {name!r}; choose one of {', '.join(DEMOS)}")
    return demo.build(name, out, seed=seed, source=source, store=store, log=log)


def _folder(demo: Demo, out: str | Path | None) -> Path:
    """A built demo's folder: ``out``, or its folder under this checkout's ``assets/``."""
    return Path(out) if out else Path(__file__).resolve().parents[2] / "assets" / demo.folder


def _content_hash(ws: Workspace) -> str:
    """A built demo's workspace hash, its data's fingerprint included (what its store keys)."""
    from sde_core.inputs.data import load_dataset
    from sde_core.pipeline.workspace import workspace_hash

    return workspace_hash(ws, data_fingerprint=load_dataset(ws.dataset_spec()).fingerprint)


def refill_demo_store(
    name: str,
    out: str | Path | None = None,
    *,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
) -> DemoResult:
    """Rebuild only the results store of the built demo ``name``: its ``[defaults]`` set to
    the recipe's (after a change of what the recipe pins, such as the null check's size),
    then every model evaluated and shipped (:func:`~sde_core.pipeline.demo.fill_store`). The
    data, the forget set and the models are not touched, so a demo whose models are not
    reused by its builder (the facts demo retrains) keeps them, and the workspace hash stays.

    Raises:
        SettingsError: no demo has that name. SDEError: the folder is not a built demo.
    """
    import dataclasses
    import time

    from sde_core.pipeline.demo import fill_store
    from sde_core.pipeline.demo_recipes import STORE_FILE
    from sde_core.pipeline.workspace_load import load_workspace
    from sde_core.pipeline.workspace_write import workspace_toml, write_workspace

    demo = DEMOS.get(name)
    if demo is None:
        raise SettingsError(f"no demo {name!r}; choose one of {', '.join(DEMOS)}")
    say = log or (lambda _line: None)
    t0 = time.perf_counter()
    folder = _folder(demo, out)
    ws = load_workspace(folder)
    pinned = dataclasses.replace(ws, defaults=demo.defaults(name, seed))
    if workspace_toml(pinned) != (folder / "workspace.toml").read_text(encoding="utf-8"):
        write_workspace(pinned)  # every setting the recipe pins, written out
        ws = load_workspace(folder)
        say(f"{folder}: [defaults] set to the recipe's")
    ws_hash = _content_hash(ws)
    store = fill_store(ws, folder / STORE_FILE)
    seconds = time.perf_counter() - t0
    line = (
        f"refilled {store} ({store.stat().st_size / 1e6:.2f} MB) in {seconds:.0f}s; workspace "
        f"hash {ws_hash[:16]}"
    )
    return DemoResult(folder, ws_hash, seconds, store, (line,))


def redo_demo_sweep(
    name: str,
    out: str | Path | None = None,
    *,
    log: Callable[[str], None] | None = None,
) -> DemoResult:
    """Rerun only the Figure 6 sweep of the built diffusion demo ``name`` (its
    ``fig6_sweep.csv``, from the models it holds, at its ``[defaults]``): after a change of the
    sweep's columns or of the algorithm. The data, the models and the results store are not
    touched.

    Raises:
        SettingsError: no demo has that name, or it ships no sweep (the message lists those
            that do). SDEError: the folder is not a built demo.
    """
    import time

    from sde_core.pipeline.workspace_load import load_workspace

    if name not in DIFFUSION_DEMOS:
        raise SettingsError(
            f"demo {name!r} ships no sweep; the demos with one: {', '.join(DIFFUSION_DEMOS)}"
        )
    t0 = time.perf_counter()
    folder = _folder(DEMOS[name], out)
    ws = load_workspace(folder)
    path = write_fig6_sweep(ws, log=log)
    seconds = time.perf_counter() - t0
    ws_hash = _content_hash(ws)
    line = f"wrote {path} in {seconds:.0f}s; workspace hash {ws_hash[:16]}"
    return DemoResult(folder, ws_hash, seconds, None, (line,))
