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
the PDF. Verifying a report that was handed over is :mod:`sde_core.services.report_verify`.
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
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sde_core import __version__
from sde_core.common.fsio import atomic_write_bytes, atomic_write_text
from sde_core.common.hashing import array_sha256, file_sha256
from sde_core.errors import ExportError
from sde_core.inputs.data import DatasetBundle, load_dataset
from sde_core.inputs.indices import load_index_file
from sde_core.pipeline.criterion import Criterion
from sde_core.pipeline.evaluation.workspace_run import EvaluationResult, evaluate_workspace
from sde_core.pipeline.model_inputs import Progress
from sde_core.pipeline.settings import ALGORITHM_VERSION, EvalSettings
from sde_core.pipeline.store import ResultsStore, workspace_store_path
from sde_core.pipeline.workspace import Workspace
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.services.signing import (
    load_private_key,
    public_key_fingerprint,
    sign_files,
    signature_path,
)
from sde_core.viz.pdf import html_to_pdf
from sde_core.viz.report.document import AuditContext, report_document
from sde_core.viz.report.html_page import build_html_report

__all__ = [
    "PACKAGES",
    "SIGN_KEY_PASSWORD_ENV",
    "ReportFiles",
    "build_manifest",
    "create_report",
    "data_manifest",
    "environment",
    "report_file_stem",
    "report_json_bytes",
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
