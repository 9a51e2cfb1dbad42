"""Every repository path docs/architecture.md names exists (a moved file fails here)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "architecture.md"
#: where a path the document writes relative to a package is looked up
BASES = (REPO, REPO / "sde_core", REPO / "sde_core" / "pipeline", REPO / "docs")
_PATHLIKE = re.compile(r"^[\w./*-]+$")


def named_paths(text: str) -> list[str]:
    """Code spans that name a file or folder: with a ``/`` or a file suffix; placeholders
    (``NAME``, ``*``) and URLs are left out."""
    out = []
    for span in re.findall(r"`([^`\n]+)`", text):
        if not _PATHLIKE.match(span) or "NAME" in span or "*" in span or span.startswith("/"):
            continue
        if "/" in span or re.search(r"\.(py|md|toml|txt)$", span):
            out.append(span)
    return out


def exists(span: str) -> bool:
    if "/" in span:
        return any((base / span).exists() for base in BASES)
    return any(p.name == span for top in ("sde_core", "tests", "pages", "docs", "assets") for p in
               (REPO / top).rglob(span)) or (REPO / span).exists()  # fmt: skip


def test_every_path_the_architecture_doc_names_exists():
    spans = named_paths(DOC.read_text(encoding="utf-8"))
    assert len(spans) > 40, spans  # the document names its modules
    missing = sorted({s for s in spans if not exists(s)})
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_the_architecture_registry_is_placed_in_its_module():
    text = DOC.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| an architecture |"))
    assert "`inputs/architectures.py`" in row, row
    assert "ARCHITECTURES" in (REPO / "sde_core/inputs/architectures.py").read_text()
