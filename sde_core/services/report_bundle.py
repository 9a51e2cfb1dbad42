"""The dashboard's signed report: the report files written, signed with the operator's key
and packed in one ZIP (:func:`signed_report_zip`), through the public functions of
:mod:`sde_core.services.audit` and :mod:`sde_core.services.signing`."""

from __future__ import annotations

import io
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sde_core.errors import SigningError
from sde_core.pipeline.criterion import Criterion
from sde_core.pipeline.evaluation.workspace_run import EvaluationResult
from sde_core.services.audit import write_report_files
from sde_core.viz.report.document import AuditContext

__all__ = ["SignedBundle", "signed_report_zip"]


@dataclass(frozen=True)
class SignedBundle:
    """A signed report as one ZIP.

    Attributes:
        data: the ZIP's bytes (the HTML, JSON, PDF when printed, and the ``.sig.json``).
        names: the file names inside. fingerprint: the signing key's fingerprint.
        sha256: the SHA-256 of the JSON report. pdf_error: why there is no PDF, or None.
    """

    data: bytes
    names: tuple[str, ...]
    fingerprint: str
    sha256: str
    pdf_error: str | None


def signed_report_zip(
    result: EvaluationResult,
    manifest: Mapping[str, Any],
    workspace_name: str,
    key_file: str | Path,
    *,
    password: str = "",
    pdf: bool = True,
    notes: str | None = None,
    context: AuditContext | None = None,
    criterion: Criterion | None = None,
) -> SignedBundle:
    """Write the report files to a temporary folder, sign them with ``key_file`` and return
    them as one ZIP (the key is read where it lies and never copied).

    Raises:
        SigningError: the key file is missing, unreadable, encrypted without (or with a
            wrong) password, or not an Ed25519 key.
    """
    path = Path(str(key_file).strip()).expanduser()
    if not str(key_file).strip():
        raise SigningError(
            "choose the Ed25519 private key file to sign with (a path on this machine)"
        )
    if not path.is_file():
        raise SigningError(f"{path} is not a file: give the path of your Ed25519 private key")
    with tempfile.TemporaryDirectory(prefix="sde-signed-report-") as tmp:
        files = write_report_files(
            result, manifest, tmp, workspace_name, pdf=pdf, notes=notes, context=context,
            sign_key=path, key_password=password.encode() if password else None,
            criterion=criterion,
        )  # fmt: skip
        written = [p for p in (files.json, files.html, files.pdf, files.signature) if p]
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for item in written:
                archive.write(item, item.name)
        return SignedBundle(
            buffer.getvalue(),
            tuple(p.name for p in written),
            str(files.fingerprint),
            files.sha256,
            files.pdf_error,
        )
