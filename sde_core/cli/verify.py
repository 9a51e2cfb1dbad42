"""``report`` and ``verify``: evidence you can hand over, and one command to re-check it.

``python -m sde_core report WORKSPACE --out DIR`` evaluates the workspace (CLI flags override
its ``[defaults]``) and writes ``sde-report-<name>.html`` (self-contained, opens offline),
``.json`` (the numbers, verdicts and the manifest: checkpoint and data hashes, settings, seeds,
software) and, with Chromium, ``.pdf``; ``--paper`` adds ``<stem>-paper.zip``, every figure as
SVG/PDF and every table as LaTeX/Markdown (:mod:`sde_core.viz.report.paper_export`).

``python -m sde_core verify REPORT.json [--workspace WS]`` re-hashes every file the manifest
names and recomputes every model from the workspace (never from a results store), then prints,
per model, ``identical``, ``equivalent`` (numbers moved only within what their near-ties and
conditioning allow on another machine, each moved field named; method §13) or what differs
(fields, file hashes). Exit status 0 when identical or equivalent, 1 when anything differs.

``report --sign-key KEY`` signs every report file with the operator's Ed25519 key
(``<stem>.sig.json``); ``verify`` then checks that signature first (the given file is one of
the signed files, every listed file unchanged, the key's fingerprint named) and fails on one
changed byte. ``--expect-key`` names the operator's key; without it the verdict is "signed by
an unknown key" and the exit status 1 unless ``--accept-unknown-key``. ``verify
--signature-only`` checks only the signature (no workspace needed; any of the report's files
may be given, the PDF included).

Without ``--workspace``, ``verify`` opens the workspace folder the report's manifest names
only when it lies inside the allowed folders (``$SDE_DATA_ROOTS``, or the working folder and
its ``assets/`` when unset): a report someone hands you does not choose which folder is read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sde_core.cli._args import (
    add_settings_arguments,
    add_time_limit_argument,
    settings_overrides,
)

__all__ = ["register_verify"]


def _cmd_report(args: argparse.Namespace) -> int:
    from sde_core.pipeline.workspace_load import load_workspace
    from sde_core.services.audit import create_report
    from sde_core.viz.report.document import AuditContext

    ws = load_workspace(args.workspace)
    settings = ws.defaults.with_overrides(**settings_overrides(args))

    def progress(stage: str, done: int, total: int) -> None:
        if stage == "models" and not args.quiet:
            print(f"models evaluated: {done}/{total}", file=sys.stderr)

    files = create_report(
        ws,
        settings,
        out_dir=args.out,
        models=args.models.split(",") if args.models else None,
        use_store=not args.no_store,
        pdf=not args.no_pdf,
        notes=args.notes,
        context=AuditContext(args.purpose, args.requester, args.operator),
        sign_key=args.sign_key,
        progress=progress,
        time_limit=args.time_limit,
    )
    print(f"wrote {files.html}")
    print(f"wrote {files.json} (SHA-256 {files.sha256})")
    if files.pdf is not None:
        print(f"wrote {files.pdf}")
    elif not args.no_pdf:
        print(f"no PDF: {files.pdf_error}", file=sys.stderr)
    if files.signature is not None:
        print(f"wrote {files.signature} (Ed25519 key {files.fingerprint})")
    if args.paper:
        from sde_core.common.fsio import atomic_write_bytes
        from sde_core.viz.report.paper_export import paper_bundle

        bundle = paper_bundle(files.result)
        path = files.json.with_name(f"{files.json.stem}-paper.zip")
        atomic_write_bytes(path, bundle.data)
        print(f"wrote {path} ({len(bundle.names)} files: figures SVG/PDF, tables LaTeX/Markdown)")
        if bundle.figure_error:
            print(f"no figures in it: {bundle.figure_error}", file=sys.stderr)
    print(f"re-check it with: python -m sde_core verify {files.json}")
    return 0


def _check_signature(args: argparse.Namespace) -> bool | None:
    """Check the report's signature when it has one (or one is asked for); print the result.

    Returns:
        True/False for a signature that passes/fails, None for an unsigned report where no
        signature was asked for.
    """
    from sde_core.services.signing import signature_path, verify_signature

    path = args.signature or signature_path(args.report)
    asked = bool(args.signature or args.expect_key or args.signature_only)
    if not asked and not path.exists() and not path.is_symlink():  # a FIFO there is refused
        print(f"not signed: no {path.name} beside the report")
        return None
    check = verify_signature(
        path,
        expect_key=args.expect_key,
        subject=args.report,
        accept_unknown_key=args.accept_unknown_key,
    )
    for line in check.lines():
        print(line)
    return check.ok


def _cmd_verify(args: argparse.Namespace) -> int:
    signed = _check_signature(args)
    if args.signature_only:
        return 0 if signed else 1
    from sde_core.services.report_verify import verify_report  # heavy: torch, the evaluation

    def progress(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr)

    result = verify_report(
        args.report,
        args.workspace,
        fresh_activations=args.fresh_activations,
        progress=progress,
        time_limit=args.time_limit,
    )
    for line in result.lines():
        print(line)
    return 0 if result.ok and signed is not False else 1


def register_verify(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``report`` and ``verify`` commands."""
    r = subparsers.add_parser(
        "report",
        help="evaluate a workspace and write an audit-grade report (HTML, JSON, PDF)",
        description=(
            "Evaluate a workspace and write sde-report-<name>.html (opens offline), .json "
            "(numbers, verdicts and the manifest of what was evaluated) and, with Chromium, "
            ".pdf. Re-check it later with `python -m sde_core verify`."
        ),
    )
    r.add_argument("workspace", help="workspace folder or its workspace.toml")
    r.add_argument("--out", required=True, help="folder for the report files")
    add_settings_arguments(r)
    r.add_argument("--models", help="comma-separated model names (default: all)")
    r.add_argument("--notes", help="free text included in the report")
    r.add_argument("--purpose", help="why the audit was run (printed on the first page)")
    r.add_argument("--requester", help="who asked for the audit (printed on the first page)")
    r.add_argument("--operator", help="who ran the audit (printed on the first page)")
    r.add_argument(
        "--sign-key",
        help="the operator's Ed25519 private key (PEM or OpenSSH; password, if any, in "
        "$SDE_SIGN_KEY_PASSWORD): writes <stem>.sig.json signing every report file",
    )
    r.add_argument("--no-store", action="store_true", help="do not read or write the store")
    r.add_argument("--no-pdf", action="store_true", help="skip the PDF (needs Chromium)")
    r.add_argument(
        "--paper",
        action="store_true",
        help="also write <stem>-paper.zip: every figure as SVG and PDF (needs kaleido and "
        "Chromium; tables only without them) and every table as LaTeX and Markdown",
    )
    r.add_argument("--quiet", action="store_true", help="no progress lines")
    add_time_limit_argument(r)
    r.set_defaults(func=_cmd_report)

    v = subparsers.add_parser(
        "verify",
        help="re-hash and recompute a report from its workspace: identical, or what differs",
        description=(
            "Re-hash every file a report's manifest names (checkpoints, data, forget set) and "
            "recompute every model from the workspace, never from a results store; print per "
            "model 'identical', 'equivalent' (moved only within the tolerance another machine "
            "allows: near-tie decisions and conditioning, method §13; every moved field named) "
            "or what differs. Exit status 0 when identical or equivalent, 1 when anything "
            "differs (a file hash, a decision that is not a near-tie, a number beyond its "
            "tolerance)."
        ),
    )
    v.add_argument("report", help="the report's .json (or .html) file")
    v.add_argument(
        "--workspace",
        help="the workspace folder (default: the one recorded in the report, if it lies "
        "inside $SDE_DATA_ROOTS, or the working folder when that is unset)",
    )
    v.add_argument(
        "--fresh-activations",
        action="store_true",
        help="re-extract every activation in a temporary cache (slower; default: the "
        "workspace's hash-checked activation cache)",
    )
    v.add_argument(
        "--signature",
        type=Path,
        help="the signature file (default: <stem>.sig.json beside the report)",
    )
    v.add_argument(
        "--expect-key",
        help="the operator's key: its fingerprint (SHA256:…) or public-key file; another "
        "signing key fails",
    )
    v.add_argument(
        "--accept-unknown-key",
        action="store_true",
        help="accept a valid signature by a key you did not name with --expect-key (the "
        "verdict still says 'signed by an unknown key'); without it such a signature fails",
    )
    v.add_argument(
        "--signature-only",
        action="store_true",
        help="check only the signature (every signed file unchanged); needs no workspace",
    )
    v.add_argument("--quiet", action="store_true", help="no progress lines")
    add_time_limit_argument(v)
    v.set_defaults(func=_cmd_verify)
