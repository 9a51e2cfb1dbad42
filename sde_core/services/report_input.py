"""A report someone handed over, read as hostile input: bounded, then checked field by field.

``verify`` reads a report's ``.json`` (or the document embedded in its ``.html``) that may come
from anyone. :func:`read_report` reads it only if it is a regular file of at most
:data:`MAX_REPORT_BYTES` (:func:`~sde_core.common.bounded_json.read_regular_file`), parses it
with a depth and an integer-digit cap, and :func:`check_report_shape` checks the type of every
field ``verify`` uses before anything uses it, so a damaged or forged report gives one
:class:`~sde_core.errors.SettingsError` naming the field — never a ``KeyError`` or a
``TypeError``; :func:`recorded_workspace` opens the folder the report names only inside the
allowed folders. Non-finite numbers (``NaN``, ``Infinity``, ``1e999``) are left in place: the
comparison (:func:`sde_core.pipeline.reproduce.compare_model`) counts each as a difference.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sde_core.common.bounded_json import loads_bounded, read_regular_file
from sde_core.common.paths import (
    ROOTS_ENV,
    allowed_roots,
    check_path_text,
    is_inside,
    resolve_in_roots,
)
from sde_core.errors import PathError, SettingsError
from sde_core.viz.report.document import (
    REPORT_FORMAT,
    REPORT_FORMAT_VERSION,
    REPORT_MAX_DEPTH,
    report_from_html,
)

__all__ = ["MAX_REPORT_BYTES", "check_report_shape", "read_report", "recorded_workspace"]

#: Largest report file read (the demo's HTML has 6 MB, its JSON 0.2 MB; 1,000 models fit).
MAX_REPORT_BYTES = 256 * 1024 * 1024
#: Manifest parts that must be tables when present.
_TABLES = ("data", "forget_set", "generator", "environment", "settings", "models")
#: Counts that must be whole numbers ≥ 0 when present: (part, field).
_COUNTS = (("data", "n_train"), ("data", "n_test"), ("forget_set", "size"))


def _bad(path: Path, where: str, expected: str, value: Any) -> SettingsError:
    return SettingsError(
        f"{path} is not a report verify can read: {where} must be {expected}, not "
        f"{type(value).__name__}: give the file `python -m sde_core report` wrote"
    )


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_report_shape(document: Any, path: Path) -> dict[str, Any]:
    """``document`` if it has the fields ``verify`` uses, with their types.

    Raises:
        SettingsError: not an SDE report, a newer format, or a field of the wrong type (the
            message names it).
    """
    if not isinstance(document, dict) or document.get("format") != REPORT_FORMAT:
        raise SettingsError(
            f'{path} is not an SDE report (no "format": "{REPORT_FORMAT}"): verify reads the '
            "files written by `python -m sde_core report` or the dashboard's Report page"
        )
    version = document.get("format_version")
    if not (isinstance(version, int) and not isinstance(version, bool)) or not (
        1 <= version <= REPORT_FORMAT_VERSION
    ):
        raise SettingsError(
            f"{path} has report format version {str(version)[:20]!r}; this sde_core reads 1 to "
            f"{REPORT_FORMAT_VERSION}: give a report it wrote (or upgrade sde_core)"
        )
    manifest = document.get("manifest")
    if not isinstance(manifest, dict):
        raise SettingsError(f"{path} has no manifest, so there is nothing to verify against")
    workspace = manifest.get("workspace")
    if not isinstance(workspace, dict):
        raise _bad(path, "manifest.workspace", "a table", workspace)
    if not isinstance(workspace.get("path"), str):
        raise _bad(path, "manifest.workspace.path", "a folder path", workspace.get("path"))
    for part in _TABLES:
        if part in manifest and not isinstance(manifest[part], dict):
            raise _bad(path, f"manifest.{part}", "a table", manifest[part])
    packages = manifest.get("environment", {}).get("packages", {})
    if not isinstance(packages, dict):
        raise _bad(path, "manifest.environment.packages", "a table", packages)
    for part, key in _COUNTS:
        value = manifest.get(part, {}).get(key)
        if value is not None and not _is_count(value):
            raise _bad(path, f"manifest.{part}.{key}", "a whole number ≥ 0", value)
    settings = document.get("settings")
    if settings is not None and not isinstance(settings, dict):
        raise _bad(path, "settings", "a table", settings)
    for where, models in (
        ("models", document.get("models", {})),
        ("manifest.models", manifest.get("models", {})),
    ):
        if not isinstance(models, dict):
            raise _bad(path, where, "a table of models", models)
        for name, entry in models.items():
            if not isinstance(entry, Mapping):
                raise _bad(path, f"{where}.{name[:40]}", "a table", entry)
            ties = entry.get("near_ties")
            if ties is not None and not isinstance(ties, Mapping):
                raise _bad(path, f"{where}.{name[:40]}.near_ties", "a table", ties)
    return document


def read_report(path: str | Path) -> dict[str, Any]:
    """The report document of a ``.json`` report or the one embedded in an ``.html`` report,
    read within its limits and checked (:func:`check_report_shape`).

    Raises:
        SettingsError: missing, not a regular file, too large, too deep, not UTF-8 or JSON,
            not an SDE report, or a field of the wrong type.
    """
    p = Path(path)
    try:
        data = read_regular_file(p, max_bytes=MAX_REPORT_BYTES, what="report", error=SettingsError)
    except SettingsError as exc:
        if not p.exists():
            raise SettingsError(
                f"report {p} does not exist: give the report's .json or .html file"
            ) from None
        raise exc from None
    if p.suffix.lower() in (".html", ".htm"):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise SettingsError(f"cannot read report {p}: it is not UTF-8 text") from None
        document = report_from_html(text)
    else:
        document = loads_bounded(
            data, max_depth=REPORT_MAX_DEPTH, what=f"report {p}", error=SettingsError
        )
    return check_report_shape(document, p)


def recorded_workspace(manifest: Mapping[str, Any]) -> Path:
    """The workspace folder a report's manifest names, if it lies inside the allowed folders
    (:func:`~sde_core.common.paths.allowed_roots`: ``$SDE_DATA_ROOTS``, or the working folder
    and its ``assets/`` when unset): a report someone hands over must not choose which folder
    is read and which of its code runs.

    Raises:
        PathError: the folder is outside the allowed folders (or not a plain path).
        SettingsError: it does not exist here.
    """
    what = "the workspace folder the report names"
    text = check_path_text(manifest["workspace"]["path"], what)
    roots = allowed_roots()
    try:
        resolved = Path(text).expanduser().resolve()
    except (OSError, RuntimeError):
        raise PathError(f"{what}, {text!r:.300}, cannot be resolved") from None
    if not is_inside(resolved, roots):
        raise PathError(
            f"the report names the workspace folder {resolved}, outside the allowed folders "
            f"({', '.join(map(str, roots))}): verify never opens a folder on a report's word; "
            f"pass the folder you mean with --workspace, or add it to {ROOTS_ENV}"
        )
    folder = resolve_in_roots(text, roots, what=what, must_exist=False)
    if not folder.exists():
        raise SettingsError(
            f"the workspace folder {folder} recorded in the report does not exist here: pass "
            "the workspace's folder (--workspace)"
        )
    return folder
