"""The report as a JSON document (:func:`report_document`, what ``verify`` recomputes), who ran
the audit (:class:`AuditContext`), and reading the document back out of a report's HTML
(:func:`report_from_html`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from sde_core.common.bounded_json import loads_bounded
from sde_core.errors import SettingsError
from sde_core.families.base import Family
from sde_core.families.registry import family_of_entry
from sde_core.viz.formatting import records
from sde_core.viz.verdicts.explanation import explain_verdict, retrain_row
from sde_core.viz.verdicts.summary import summarize_verdict

__all__ = [
    "REPORT_DATA_ID",
    "REPORT_FORMAT",
    "REPORT_FORMAT_VERSION",
    "REPORT_MAX_DEPTH",
    "AuditContext",
    "family_verdict_notes",
    "manifest_family",
    "report_document",
    "report_from_html",
]

#: ``format`` and ``format_version`` of :func:`report_document`.
REPORT_FORMAT = "sde-report"
REPORT_FORMAT_VERSION = 1
#: ``id`` of the HTML element that holds the report document.
REPORT_DATA_ID = "sde-report"
#: Deepest nesting of a report document that is read (the reports written nest 6 levels).
REPORT_MAX_DEPTH = 64


@dataclass(frozen=True)
class AuditContext:
    """Who ran an audit, for whom and why; printed on the report's first page when given.

    Attributes:
        purpose: why the audit was run (e.g. "erasure request #123, Art. 17 GDPR").
        requester: who asked for it. operator: who ran it (and signs it, with a key).
        role: the operator's role (printed in the signer block).
    """

    purpose: str | None = None
    requester: str | None = None
    operator: str | None = None
    role: str | None = None

    def items(self) -> list[tuple[str, str]]:
        """The given fields as ``(label, text)`` in print order (blank ones left out)."""
        fields = (("Purpose", self.purpose), ("Requested by", self.requester),
                  ("Operated by", self.operator), ("Role", self.role))  # fmt: skip
        return [(label, text.strip()) for label, text in fields if text and text.strip()]

    def to_dict(self) -> dict[str, str]:
        """The given fields as ``{"purpose"|"requester"|"operator": text}``."""
        return {k: v.strip() for k, v in asdict(self).items() if isinstance(v, str) and v.strip()}


def family_verdict_notes(result: Any, manifest: Mapping[str, Any] | None) -> dict[str, str]:
    """Each model's family verdict note (the family seam's ``verdict_note``), known by the
    ``arch`` the manifest records for it and the evaluated layer; none without a manifest."""
    models = (manifest or {}).get("models") or {}
    layer = str(result.settings.layer)
    return {
        str(name): family_of_entry(entry.get("arch"), layer).verdict_note
        for name, entry in models.items()
        if isinstance(entry, Mapping)
    }


def manifest_family(result: Any, manifest: Mapping[str, Any] | None) -> Family | None:
    """The model family of a report's models: the family seam's answer for the ``arch`` the
    manifest records for its first model and the evaluated layer; None without a manifest."""
    models = [m for m in ((manifest or {}).get("models") or {}).values() if isinstance(m, Mapping)]
    if not models:
        return None
    return family_of_entry(models[0].get("arch"), str(result.settings.layer))


def report_document(
    result: Any,
    manifest: Mapping[str, Any] | None = None,
    context: AuditContext | None = None,
) -> dict[str, Any]:
    """The report as a JSON document (what ``verify`` recomputes).

    Returns:
        ``{"format": "sde-report", "format_version": 1, "manifest": …, "settings": …,
        "workspace_hash": …, "models": {name: {…the method §10 fields…, "verdict",
        "explanation", "summary"}}}`` and, with a non-empty ``context``, ``"audit": {"purpose",
        "requester", "operator"}``; non-finite numbers are ``null``.
    """
    doc = result.to_json_dict()
    retrain = retrain_row(result.models)
    by_name = {row["name"]: row for row in records(result.models)}
    s = result.settings
    notes = family_verdict_notes(result, manifest)
    for name, entry in doc["models"].items():
        explained = explain_verdict(
            by_name[name], s.targets, retrain, draws=getattr(result, "draws", None),
            note=notes.get(name, ""),
        )  # fmt: skip
        entry["verdict"] = explained.label
        entry["explanation"] = explained.text
        summary = summarize_verdict(
            by_name[name], s.targets, alpha=s.alpha, alpha_calibrated=s.alpha_calibrated,
            note=notes.get(name, ""),
        )  # fmt: skip
        entry["summary"] = {k: v for k, v in asdict(summary).items() if k not in ("name", "role")}
    audit = context.to_dict() if context is not None else {}
    return {
        "format": REPORT_FORMAT,
        "format_version": REPORT_FORMAT_VERSION,
        "manifest": dict(manifest) if manifest is not None else None,
        **({"audit": audit} if audit else {}),
        **doc,
    }


def _json_for_html(document: Mapping[str, Any]) -> str:
    """JSON safe inside ``<script>`` (``</`` escaped; strict: NaN/inf already null)."""
    return json.dumps(document, allow_nan=False, ensure_ascii=False).replace("</", "<\\/")


def report_from_html(text: str) -> dict[str, Any]:
    """The report document embedded in a report's HTML.

    Raises:
        SettingsError: the HTML holds no report document.
    """
    marker = f'<script type="application/json" id="{REPORT_DATA_ID}">'
    start = text.find(marker)
    end = text.find("</script>", start) if start >= 0 else -1
    if start < 0 or end < 0:
        raise SettingsError(
            "this HTML file holds no SDE report document: give the .json or .html written by "
            "`python -m sde_core report` or the dashboard's Report page"
        )
    return loads_bounded(
        text[start + len(marker) : end].encode("utf-8", "surrogatepass"),
        max_depth=REPORT_MAX_DEPTH,
        what="the report document in this HTML file",
        error=SettingsError,
    )
