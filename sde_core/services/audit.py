"""Evidence you can hand over: the report manifest, report files, and their verification.

:func:`build_manifest` pins what an evaluation evaluated::

    {"created": ISO time (UTC),
     "generator": {"sde_core": version, "algorithm_version": ALGORITHM_VERSION},
     "workspace": {"name", "path" (absolute folder), "hash" (content hash), "toml_sha256"},
     "data": {"spec" (the [dataset] table), "fingerprint", "n_train", "n_test",
              "num_classes", "class_names"},
     "forget_set": {"path", "file_sha256", "indices_sha256" (sorted unique int64), "size"},
     "models": {name: {"role", "method", "arch", "arch_kwargs", "checkpoint", "sha256",
                       "recorded_sha256", "matches_recorded", "seed", "method_seconds",
                       "evaluation_seconds"}},
     "settings": EvalSettings.result_key() (with "algorithm"),
     "seeds": {"evaluation": seed, "derived": {...how every random draw is seeded...},
               "models": {name: training seed}},
     "environment": {"python", "platform", "machine", "cpu_count", "packages": {...}},
     "timing": {"evaluation_wall_seconds", "report_seconds", ...}}

:func:`create_report` evaluates a workspace and writes the HTML report (manifest and the
:func:`~sde_core.viz.report.report_document` embedded), the JSON document and, with Chromium,
the PDF. :func:`verify_report` re-hashes every file the manifest names, recomputes every model's
numbers from the workspace (never from a results store) and says, per model, whether it is
identical, equivalent (moved only within what another machine may move it: method §13,
:mod:`sde_core.pipeline.reproduce`) or what differs: which fields, which files' hashes.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata
import json
import math
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sde_core import __version__
from sde_core.common.fsio import atomic_write_bytes, atomic_write_text
from sde_core.common.hashing import array_sha256, file_sha256
from sde_core.errors import ExportError, SDEError
from sde_core.inputs.data import DatasetBundle, load_dataset
from sde_core.inputs.indices import load_index_file
from sde_core.pipeline.criterion import Criterion
from sde_core.pipeline.evaluation.near_ties import ModelNearTies
from sde_core.pipeline.evaluation.workspace_run import EvaluationResult, evaluate_workspace
from sde_core.pipeline.model_inputs import Progress
from sde_core.pipeline.reproduce import Outcome, ResultDiff, compare_model, worst_outcome
from sde_core.pipeline.settings import ALGORITHM_VERSION, EvalSettings
from sde_core.pipeline.store import ResultsStore, workspace_store_path
from sde_core.pipeline.workspace import Workspace
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.services.report_input import read_report, recorded_workspace
from sde_core.services.signing import (
    load_private_key,
    public_key_fingerprint,
    sign_files,
    signature_path,
)
from sde_core.viz.pdf import html_to_pdf
from sde_core.viz.report import AuditContext, build_html_report, report_document

__all__ = [
    "PACKAGES",
    "SIGN_KEY_PASSWORD_ENV",
    "ModelCheck",
    "ReportFiles",
    "Verification",
    "build_manifest",
    "create_report",
    "data_manifest",
    "environment",
    "load_report",
    "report_file_stem",
    "report_json_bytes",
    "verify_report",
    "write_report_files",
]

#: Distributions whose versions a manifest records (those that can change a number or a chart).
PACKAGES = (
    "numpy",
    "scipy",
    "pandas",
    "numba",
    "torch",
    "torchvision",
    "scikit-learn",
    "safetensors",
    "plotly",
    "pyarrow",
)
#: Environment variable holding the password of an encrypted signing key (never a flag).
SIGN_KEY_PASSWORD_ENV = "SDE_SIGN_KEY_PASSWORD"


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def environment() -> dict[str, Any]:
    """Python, platform, CPU count and the versions of :data:`PACKAGES` (None when absent)."""
    packages: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            packages[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            packages[name] = None
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "packages": packages,
    }


def _finite(value: Any) -> Any:
    """A JSON-safe scalar: NumPy scalars as Python values, NaN/inf as None."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def data_manifest(ws: Workspace, bundle: DatasetBundle) -> dict[str, Any]:
    """The ``data`` and ``forget_set`` parts of a manifest (what
    :func:`sde_core.viz.report.dataset_table` shows as a small table).

    Raises:
        DataError: the forget-set file is missing or invalid.
    """
    forget_path = ws.path(ws.forget_indices)
    forget = np.unique(load_index_file(forget_path, len(bundle.train_labels)).astype(np.int64))
    return {
        "data": {
            "spec": {k: (str(v) if isinstance(v, Path) else v) for k, v in ws.dataset.items()},
            "fingerprint": bundle.fingerprint,
            "n_train": len(bundle.train_labels),
            "n_test": len(bundle.test_labels),
            "num_classes": int(bundle.num_classes),
            "class_names": list(bundle.class_names),
        },
        "forget_set": {
            "path": ws.forget_indices,
            "file_sha256": file_sha256(forget_path),
            "indices_sha256": array_sha256(forget),
            "size": int(forget.size),
        },
    }


def build_manifest(
    ws: Workspace,
    result: EvaluationResult,
    *,
    bundle: DatasetBundle | None = None,
    timing: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """What ``result`` evaluated, pinned (see the module docstring for the layout).

    Args:
        ws: the evaluated workspace.
        result: its evaluation (the manifest lists the models of ``result.models``).
        bundle: the loaded dataset (loaded from the workspace when None).
        timing: extra wall times in seconds (e.g. ``{"evaluation_wall_seconds": 31.2}``).

    Raises:
        WorkspaceError, DataError: a file the manifest hashes is missing or unreadable.
    """
    bundle = bundle if bundle is not None else load_dataset(ws.dataset_spec())
    rows = {row["name"]: row for row in result.models.to_dict("records")}
    models: dict[str, Any] = {}
    for name, row in rows.items():
        entry = ws.model(name)
        digest = file_sha256(ws.path(entry.checkpoint))
        models[name] = {
            "role": entry.role,
            "method": entry.method,
            "arch": entry.arch,
            "arch_kwargs": dict(entry.arch_kwargs),
            "checkpoint": entry.checkpoint,
            "sha256": digest,
            "recorded_sha256": entry.sha256,
            "matches_recorded": None if entry.sha256 is None else entry.sha256 == digest,
            "seed": entry.seed,
            "method_seconds": _finite(entry.seconds),
            "evaluation_seconds": _finite(row.get("eval_seconds")),
        }
    s = result.settings
    eval_seconds = [m["evaluation_seconds"] for m in models.values()]
    times = {"evaluation_seconds_sum": float(sum(t for t in eval_seconds if t is not None))}
    times.update({k: float(v) for k, v in (timing or {}).items()})
    return {
        "created": _now(),
        "generator": {"sde_core": __version__, "algorithm_version": ALGORITHM_VERSION},
        "workspace": {
            "name": ws.name or ws.root.name,
            "path": str(ws.root),
            "hash": result.workspace_hash,
            "toml_sha256": file_sha256(ws.root / "workspace.toml")
            if (ws.root / "workspace.toml").is_file()
            else None,
        },
        **data_manifest(ws, bundle),
        "models": models,
        "settings": s.result_key(),
        "seeds": {
            "evaluation": s.seed,
            "derived": {
                "subsets (references, panels, targets, F1 controls)": f"seed {s.seed}",
                "splits of training-side subsets": f"seed {s.seed}",
                "splits of test-side subsets": f"seed {s.seed + 1}",
                "median-σ sample, MIA shadow sample, null-check pairs": f"seed {s.seed}",
            },
            "models": {name: m["seed"] for name, m in models.items()},
        },
        "environment": environment(),
        "timing": times,
    }


# --------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class ReportFiles:
    """The files of one report.

    Attributes:
        html, json: the written files. pdf: the PDF, or None when it was not made.
        pdf_error: why there is no PDF (e.g. Chromium missing), or None.
        result: the evaluation the report is about. manifest: its manifest.
        sha256: the SHA-256 of the JSON file (printed on the report's first page).
        signature: the ``.sig.json`` signing every written file, or None when unsigned.
        fingerprint: the signing key's fingerprint, or None.
    """

    html: Path
    json: Path
    pdf: Path | None
    pdf_error: str | None
    result: EvaluationResult
    manifest: dict[str, Any]
    sha256: str = ""
    signature: Path | None = None
    fingerprint: str | None = None


def report_file_stem(workspace_name: str) -> str:
    """``sde-report-<name>`` with the name reduced to safe file-name characters."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in workspace_name).strip("._")
    return f"sde-report-{safe or 'workspace'}"


def report_json_bytes(document: Mapping[str, Any]) -> bytes:
    """The bytes of a report's JSON file (strict JSON, 2-space indent, final newline): the
    report's SHA-256 is the SHA-256 of exactly these bytes."""
    return (json.dumps(document, indent=2, allow_nan=False) + "\n").encode("utf-8")


def write_report_files(
    result: EvaluationResult,
    manifest: Mapping[str, Any],
    out_dir: str | Path,
    workspace_name: str,
    *,
    pdf: bool = True,
    notes: str | None = None,
    context: AuditContext | None = None,
    sign_key: str | Path | None = None,
    key_password: bytes | None = None,
    criterion: Criterion | None = None,
) -> ReportFiles:
    """Write ``<stem>.json``, ``<stem>.html``, (with ``pdf`` and Chromium) ``<stem>.pdf`` and,
    with ``sign_key``, ``<stem>.sig.json`` signing all of them.

    The JSON is written first: its SHA-256 is printed on the first page of the HTML and PDF.
    A missing Chromium is not fatal here: the HTML and JSON are written and ``pdf_error`` says
    why the PDF is missing.

    Args:
        context: purpose, requester and operator, printed on the first page.
        sign_key: the operator's Ed25519 private key file (PEM or OpenSSH; an encrypted one
            reads its password from ``key_password``, else from ``$SDE_SIGN_KEY_PASSWORD``).
        key_password: the password of an encrypted key (the dashboard asks for it).
        criterion: the workspace's criterion of forgetting, stated on the first page.

    Raises:
        SigningError: the key cannot be loaded (checked before anything is written).
    """
    key = None
    if sign_key is not None:
        password = key_password or (os.environ.get(SIGN_KEY_PASSWORD_ENV) or "").encode() or None
        key = load_private_key(sign_key, password)
    fingerprint = public_key_fingerprint(key) if key is not None else None
    folder = Path(out_dir)
    stem = report_file_stem(workspace_name)
    html_path, json_path = folder / f"{stem}.html", folder / f"{stem}.json"
    payload = report_json_bytes(report_document(result, manifest, context))
    digest = hashlib.sha256(payload).hexdigest()
    atomic_write_bytes(json_path, payload)
    page = build_html_report(
        result,
        workspace_name,
        notes=notes,
        manifest=manifest,
        file_hint=html_path.name,
        context=context,
        document_sha256=digest,
        signed_by=fingerprint,
        criterion=criterion,
    )
    atomic_write_text(html_path, page)
    pdf_path: Path | None = None
    error: str | None = None
    if pdf:
        try:
            pdf_path = html_to_pdf(html_path, folder / f"{stem}.pdf")
        except ExportError as exc:
            error = str(exc)
    signature = None
    if key is not None:
        written = [p for p in (json_path, html_path, pdf_path) if p is not None]
        signature = sign_files(written, key, signature_path(json_path))
    return ReportFiles(
        html_path, json_path, pdf_path, error, result, dict(manifest),
        sha256=digest, signature=signature, fingerprint=fingerprint,
    )  # fmt: skip


def create_report(
    workspace: Workspace | str | Path,
    settings: EvalSettings | None = None,
    *,
    out_dir: str | Path,
    models: Sequence[str] | None = None,
    use_store: bool = True,
    pdf: bool = True,
    notes: str | None = None,
    context: AuditContext | None = None,
    sign_key: str | Path | None = None,
    progress: Progress | None = None,
    time_limit: float | None = None,
) -> ReportFiles:
    """Evaluate a workspace and write its report files (see :func:`write_report_files`).

    Args:
        workspace: the workspace or its folder.
        settings: evaluation settings (default: the workspace's ``[defaults]``).
        out_dir: the folder of the report files.
        models: the models to report (default: all).
        use_store: read and write the workspace's results store (finished models are not
            recomputed; ``verify`` always recomputes).
        pdf: also print the PDF (needs Chromium).
        notes: free text included in the report.
        context: purpose, requester and operator, printed on the first page.
        sign_key: the operator's Ed25519 private key file; signs every written file.
        progress: ``progress(stage, done, total)`` callback of the evaluation.
        time_limit: seconds each step of a trusted code model may take in its child process.
    """
    if sign_key is not None:  # a bad key fails before the evaluation, not after it
        password = os.environ.get(SIGN_KEY_PASSWORD_ENV)
        load_private_key(sign_key, password.encode() if password else None)
    ws = workspace if isinstance(workspace, Workspace) else load_workspace(workspace)
    if settings is None:
        settings = ws.defaults
    bundle = load_dataset(ws.dataset_spec())
    t0 = time.perf_counter()
    if use_store:
        with ResultsStore(workspace_store_path(ws.root)) as store:
            result = evaluate_workspace(
                ws, settings, models=models, store=store, progress=progress,
                time_limit=time_limit,
            )  # fmt: skip
    else:
        result = evaluate_workspace(
            ws, settings, models=models, progress=progress, time_limit=time_limit
        )
    elapsed = time.perf_counter() - t0
    t1 = time.perf_counter()
    manifest = build_manifest(
        ws, result, bundle=bundle, timing={"evaluation_wall_seconds": elapsed}
    )
    manifest["timing"]["manifest_seconds"] = time.perf_counter() - t1
    name = ws.name or ws.root.name
    return write_report_files(
        result, manifest, out_dir, name, pdf=pdf, notes=notes, context=context,
        sign_key=sign_key, criterion=ws.criterion,
    )  # fmt: skip


# --------------------------------------------------------------------------- verifying


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
    settings = EvalSettings.from_mapping(settings_doc)
    shared: list[str] = []
    notes: list[str] = []
    if reported_algorithm != ALGORITHM_VERSION:
        shared.append(
            f"ALGORITHM_VERSION: the report was computed with {reported_algorithm}, this "
            f"sde_core computes with {ALGORITHM_VERSION}"
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
        "acc_r": int(data.get("n_train") or 0) - n_forget,
        "acc_f": n_forget,
        "acc_te": int(data.get("n_test") or 0),
        "asr": n_forget,
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
