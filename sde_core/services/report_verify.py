"""Verifying a report someone handed over: its files' hashes and every model's numbers.

:func:`verify_report` re-hashes every file the report's manifest (:mod:`sde_core.services.audit`)
names, recomputes every model's numbers from the workspace (never from a results store) and says,
per model, whether it is identical, equivalent (moved only within what another machine may move
it: method §13, :mod:`sde_core.pipeline.reproduce`) or what differs: which fields, which files'
hashes. :func:`load_report` reads the JSON document within its limits.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sde_core import __version__
from sde_core.common.hashing import array_sha256, file_sha256
from sde_core.errors import SDEError
from sde_core.inputs.data import load_dataset
from sde_core.inputs.indices import load_index_file
from sde_core.pipeline.evaluation.metric_table import ACC_F, ACC_R, ACC_TE, ASR
from sde_core.pipeline.evaluation.near_ties import ModelNearTies
from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
from sde_core.pipeline.model_inputs import Progress
from sde_core.pipeline.reproduce import Outcome, ResultDiff, compare_model, worst_outcome
from sde_core.pipeline.settings import (
    ALGORITHM_VERSION,
    PRECISION_RULE_VERSION,
    EvalSettings,
    settings_from_key,
)
from sde_core.pipeline.workspace import Workspace
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.services.audit import environment
from sde_core.services.report_input import read_report, recorded_workspace
from sde_core.viz.report.document import report_document

__all__ = ["ModelCheck", "Verification", "load_report", "verify_report"]


def load_report(path: str | Path) -> dict[str, Any]:
    """The report document of a ``.json`` report or the one embedded in an ``.html`` report
    (read as hostile input: :func:`sde_core.services.report_input.read_report`).

    Raises:
        SettingsError: missing, not a regular file, too large or deep, not an SDE report, a
            newer format, or a field of the wrong type.
    """
    return read_report(path)


@dataclass
class ModelCheck:
    """The verification of one model.

    Attributes:
        name: the model. status: ``"identical"``, ``"equivalent"`` or ``"differs"``.
        files: files whose SHA-256 differs from the manifest (or that are missing).
        comparison: the recomputed fields against the reported ones (method §13).
        problems: other differences (entry changed, cannot recompute, …).
    """

    name: str
    files: list[str] = field(default_factory=list)
    comparison: ResultDiff = field(default_factory=ResultDiff)
    problems: list[str] = field(default_factory=list)

    @property
    def status(self) -> Outcome:
        """``"differs"`` when a file, the entry or a number beyond tolerance differs;
        ``"equivalent"`` when numbers moved only within what the near-ties allow; else
        ``"identical"``."""
        if self.files or self.problems:
            return "differs"
        return self.comparison.outcome

    def lines(self) -> list[str]:
        """Human-readable lines: the status, then one line per difference."""
        largest = self.comparison.largest_relative
        if self.status == "identical":
            out = [f"{self.name}: identical"]
        elif self.status == "equivalent":
            n = len(self.comparison.differences)
            out = [
                f"{self.name}: equivalent (largest relative change {largest:.1e}; {n} fields "
                "moved within what their near-ties allow)"
            ]
        else:
            out = [f"{self.name}: DIFFERS"]
        out += [f"  file hash differs: {f}" for f in self.files]
        out += [f"  {p}" for p in self.problems]
        out += [f"  {line}" for line in self.comparison.lines()]
        return out


@dataclass
class Verification:
    """The verification of a report.

    Attributes:
        report: the report file. workspace: the workspace folder it was checked against.
        models: one :class:`ModelCheck` per model of the report.
        shared: differences that concern every model (data, forget set, settings, algorithm).
        notes: differences that do not change results by themselves (software versions).
        seconds: wall time of the verification.
    """

    report: Path
    workspace: Path
    models: list[ModelCheck]
    shared: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def outcome(self) -> Outcome:
        """``"differs"`` if anything shared or any model differs, ``"equivalent"`` if any
        model is equivalent, else ``"identical"`` (method §13)."""
        if self.shared:
            return "differs"
        return worst_outcome(m.status for m in self.models)

    @property
    def ok(self) -> bool:
        """Whether the report is reproduced: identical or equivalent (exit status 0)."""
        return self.outcome != "differs"

    @property
    def differing(self) -> list[str]:
        """Names of the models that differ."""
        return [m.name for m in self.models if m.status == "differs"]

    def lines(self) -> list[str]:
        """The verification as text lines (shared differences, per model, notes, verdict)."""
        out = [f"verifying {self.report} against the workspace {self.workspace}"]
        out += [f"DIFFERS for every model: {s}" for s in self.shared]
        for m in self.models:
            out += m.lines()
        out += [f"note: {n}" for n in self.notes]
        n_diff = len(self.differing)
        n = len(self.models)
        if self.outcome == "identical":
            verdict = f"identical: all {n} models recomputed to the reported values"
        elif self.outcome == "equivalent":
            n_eq = sum(m.status == "equivalent" for m in self.models)
            verdict = (
                f"equivalent: all {n} models reproduced; {n_eq} moved only within the "
                "tolerance of their near-ties (method §13)"
            )
        else:
            verdict = f"DIFFERS: {n_diff} of {n} models differ" + (
                f" ({', '.join(self.differing)})" if n_diff else ""
            )
        return [*out, f"{verdict} [{self.seconds:.1f} s]"]


def _recompute(
    ws: Workspace,
    settings: EvalSettings,
    name: str,
    cache_dir: str | None,
    progress: Progress | None,
    time_limit: float | None = None,
) -> dict[str, Any]:
    result = evaluate_workspace(
        ws, settings, models=[name], cache_dir=cache_dir, progress=progress,
        time_limit=time_limit,
    )  # fmt: skip
    return report_document(result)["models"][name]


def _check_files(ws: Workspace, name: str, recorded: Mapping[str, Any] | None) -> ModelCheck:
    """The workspace entry and checkpoint hash of one model against its manifest entry."""
    check = ModelCheck(name)
    entry = ws.model(name)
    if recorded is None:
        check.problems.append("the report's manifest does not list this model")
        return check
    for key in ("role", "arch", "arch_kwargs", "method"):
        now = getattr(entry, key)
        now = dict(now) if key == "arch_kwargs" else now
        if recorded.get(key) != now:
            check.problems.append(
                f"workspace entry changed: {key} was {recorded.get(key)!r}, now {now!r}"
            )
    if recorded.get("checkpoint") != entry.checkpoint:
        check.problems.append(
            f"checkpoint path changed: {recorded.get('checkpoint')} -> {entry.checkpoint}"
        )
    checkpoint = ws.path(entry.checkpoint)
    if not checkpoint.is_file():
        check.files.append(f"{entry.checkpoint} (missing)")
        return check
    digest = file_sha256(checkpoint)
    if digest != recorded.get("sha256"):
        check.files.append(
            f"{entry.checkpoint} (report {str(recorded.get('sha256'))[:12]}…, now {digest[:12]}…)"
        )
    return check


def _check_model(
    ws: Workspace,
    settings: EvalSettings,
    name: str,
    reported: Mapping[str, Any],
    recorded: Mapping[str, Any] | None,
    cache_dir: str | None,
    rows: Mapping[str, int],
    time_limit: float | None = None,
) -> ModelCheck:
    """One model: its files against the manifest, its recomputed fields against the report
    (:func:`~sde_core.pipeline.reproduce.compare_model`)."""
    if name not in {m.name for m in ws.models}:
        return ModelCheck(name, problems=["the workspace has no model of this name"])
    check = _check_files(ws, name, recorded)
    try:
        recomputed = _recompute(ws, settings, name, cache_dir, None, time_limit)
    except Exception as exc:  # a damaged file may fail anywhere: report it, check the rest
        what = "" if isinstance(exc, SDEError) else f"{type(exc).__name__}: "
        check.problems.append(f"cannot recompute: {what}{' '.join(str(exc).split())}")
        return check
    try:
        ties = [
            ModelNearTies.from_json(doc["near_ties"])
            for doc in (reported, recomputed)
            if isinstance(doc.get("near_ties"), Mapping)
        ]
    except (TypeError, ValueError, OverflowError):
        check.problems.append("the report's near_ties record is malformed (not numbers)")
        return check
    check.comparison = compare_model(reported, recomputed, ties, rows, report=True)
    return check


def verify_report(
    report: str | Path,
    workspace: str | Path | None = None,
    *,
    fresh_activations: bool = False,
    progress: Callable[[str], None] | None = None,
    time_limit: float | None = None,
) -> Verification:
    """Re-hash and recompute a report from its workspace; say per model what differs.

    Args:
        report: the report's ``.json`` (or ``.html``).
        workspace: the workspace folder, the caller's choice (default: the folder recorded
            in the manifest, only if it lies inside the allowed folders).
        fresh_activations: extract every activation again in a temporary cache instead of
            reading the workspace's activation cache (whose entries are keyed by checkpoint and
            data hashes and checked against their own SHA-256).
        progress: called with a line of text as each model starts.
        time_limit: seconds each step of a trusted code model may take in its child process.

    Returns:
        The :class:`Verification`; nothing is written to the workspace's results store.

    Raises:
        SettingsError: the report cannot be read, or its settings are not valid here.
        PathError: no ``workspace`` is given and the report's folder is outside the allowed
            folders.
        WorkspaceError: the workspace cannot be opened.
    """
    t0 = time.perf_counter()
    path = Path(report)
    doc = load_report(path)
    manifest = doc["manifest"]
    folder = Path(workspace) if workspace is not None else recorded_workspace(manifest)
    ws = load_workspace(folder, validate=False)
    settings_doc = dict(doc.get("settings") or manifest.get("settings") or {})
    reported_algorithm = settings_doc.pop("algorithm", None)
    reported_rule = settings_doc.pop("precision_rule", 1)  # reports before the rule's key: 1
    settings = settings_from_key(settings_doc)  # a field left out: the value that left it out
    shared: list[str] = []
    notes: list[str] = []
    if reported_algorithm != ALGORITHM_VERSION:
        shared.append(
            f"ALGORITHM_VERSION: the report was computed with {reported_algorithm}, this "
            f"sde_core computes with {ALGORITHM_VERSION}"
        )
    if settings.precision and reported_rule != PRECISION_RULE_VERSION:
        shared.append(
            f"PRECISION_RULE_VERSION: the report judged its half-widths against W by rule "
            f"{reported_rule}, this sde_core by rule {PRECISION_RULE_VERSION} (method §15)"
        )
    bundle = load_dataset(ws.dataset_spec())
    data = manifest.get("data", {})
    if data.get("fingerprint") != bundle.fingerprint:
        shared.append(
            f"data fingerprint: report {str(data.get('fingerprint'))[:16]}…, workspace "
            f"{bundle.fingerprint[:16]}…"
        )
    forget_doc = manifest.get("forget_set", {})
    try:
        forget = np.unique(load_index_file(ws.path(ws.forget_indices), len(bundle.train_labels)))
        indices_hash = array_sha256(forget.astype(np.int64))
        if forget_doc.get("indices_sha256") != indices_hash:
            shared.append(
                f"forget set {ws.forget_indices}: its indices differ from the report's "
                f"({forget_doc.get('size')} rows reported, {forget.size} now)"
            )
    except SDEError as exc:
        shared.append(f"forget set: cannot read it ({exc})")
    generator = manifest.get("generator", {})
    if generator.get("sde_core") != __version__:
        notes.append(f"sde_core {generator.get('sde_core')} made the report; this is {__version__}")
    recorded_packages = manifest.get("environment", {}).get("packages", {})
    for package, version in environment()["packages"].items():
        if package in recorded_packages and recorded_packages[package] != version:
            notes.append(
                f"{package} {recorded_packages[package]} made the report; this is {version}"
            )

    n_forget = int(forget_doc.get("size") or 0)
    classic_rows = {
        ACC_R.key: int(data.get("n_train") or 0) - n_forget,
        ACC_F.key: n_forget,
        ACC_TE.key: int(data.get("n_test") or 0),
        ASR.key: n_forget,
    }
    checks: list[ModelCheck] = []
    with tempfile.TemporaryDirectory(prefix="sde-verify-") as tmp:
        for name, reported in doc.get("models", {}).items():
            if progress:
                progress(f"recomputing {name}")
            recorded = manifest.get("models", {}).get(name)
            cache_dir = tmp if fresh_activations else None
            checks.append(
                _check_model(
                    ws, settings, name, reported, recorded, cache_dir, classic_rows, time_limit
                )
            )
    return Verification(
        report=path,
        workspace=ws.root,
        models=checks,
        shared=shared,
        notes=notes,
        seconds=time.perf_counter() - t0,
    )
