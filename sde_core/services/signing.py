"""Ed25519 signatures of report files: who vouches for a report, and that no byte changed.

A signature is a small JSON file beside the report, ``<stem>.sig.json``::

    {"format": "sde-report-signature", "format_version": 1,
     "algorithm": "Ed25519",
     "public_key": base64 of the 32-byte raw public key,
     "fingerprint": "SHA256:" + hex SHA-256 of those 32 bytes,
     "files": {file name: hex SHA-256 of its bytes, ...},
     "signature": base64 of the 64-byte Ed25519 signature of the signed message}

The signed message is :func:`signed_message`: the canonical JSON (sorted keys, no spaces) of
``format``, ``algorithm``, ``public_key`` and ``files``. Verifying re-hashes every listed file
that lies beside the signature, so one changed byte of the HTML, JSON or PDF fails, and checks
the signature with the public key it carries; the fingerprint names that key, which the reader
compares with the one the operator published (``--expect-key``). A signature vouches only for
the files it lists: the file the reader verifies (``subject``) must be one of them, by name and
by hash, so a genuine ``X.sig.json`` copied beside a forged ``FINAL.json`` fails. Without an
expected key the verdict is "signed by an unknown key" and the check is not ``ok`` unless the
reader accepts that (``accept_unknown_key``, ``--accept-unknown-key``): anyone can make a key
and re-sign a forged report. The signature file is read as hostile input: a regular file of at
most :data:`MAX_SIGNATURE_BYTES`, nested at most 8 levels, every field's type checked. The keys
are the operator's own: a PEM (PKCS #8) or OpenSSH private key, e.g. from ``openssl genpkey
-algorithm ed25519``. Cryptography comes from the ``cryptography`` package (pyca), never from
code of ours.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from sde_core.common.bounded_json import loads_bounded, read_regular_file
from sde_core.common.fsio import atomic_write_json
from sde_core.common.hashing import file_sha256
from sde_core.errors import SigningError

__all__ = [
    "MAX_SIGNATURE_BYTES",
    "SIGNATURE_FORMAT",
    "SIGNATURE_SUFFIX",
    "SignatureCheck",
    "key_fingerprint",
    "load_private_key",
    "public_key_fingerprint",
    "sign_files",
    "signature_path",
    "signed_message",
    "verify_signature",
]

SIGNATURE_FORMAT = "sde-report-signature"
SIGNATURE_FORMAT_VERSION = 1
#: A report ``sde-report-x.json`` is signed in ``sde-report-x.sig.json``.
SIGNATURE_SUFFIX = ".sig.json"
_ALGORITHM = "Ed25519"
#: Largest signature file read (one lists 3 files in under 1 KB).
MAX_SIGNATURE_BYTES = 64 * 1024
_MAX_KEY_BYTES = 64 * 1024


def _raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_fingerprint(raw_public_key: bytes) -> str:
    """``"SHA256:<64 hex digits>"``: the SHA-256 of a 32-byte raw Ed25519 public key."""
    return "SHA256:" + hashlib.sha256(raw_public_key).hexdigest()


def public_key_fingerprint(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """The :func:`key_fingerprint` of a key (of its public half for a private key)."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return key_fingerprint(_raw_public(public))


def load_private_key(path: str | Path, password: bytes | None = None) -> Ed25519PrivateKey:
    """The operator's Ed25519 private key from a PEM (PKCS #8) or OpenSSH file.

    Raises:
        SigningError: the file is missing, unreadable, encrypted without a password (or with
            the wrong one), or not an Ed25519 key.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise SigningError(
            f"cannot read the signing key {p} ({exc.strerror or exc}): give the operator's "
            "Ed25519 private key (make one with `openssl genpkey -algorithm ed25519 -out KEY`)"
        ) from exc
    loaders = (serialization.load_pem_private_key, serialization.load_ssh_private_key)
    problem = "it is neither a PEM nor an OpenSSH private key"
    for load in loaders:
        try:
            key = load(data, password=password)
        except TypeError:
            problem = "it is encrypted: set SDE_SIGN_KEY_PASSWORD to its password"
            continue
        except (ValueError, UnsupportedAlgorithm) as exc:
            if "password" in str(exc).lower() or "decrypt" in str(exc).lower():
                problem = "its password is wrong (SDE_SIGN_KEY_PASSWORD)"
            continue
        if not isinstance(key, Ed25519PrivateKey):
            raise SigningError(
                f"the signing key {p} is a {type(key).__name__.removeprefix('_')}, not an "
                "Ed25519 key: make one with `openssl genpkey -algorithm ed25519 -out KEY`"
            )
        return key
    raise SigningError(f"cannot load the signing key {p}: {problem}")


def signature_path(report_file: str | Path) -> Path:
    """Where the signature of a report lies: ``sde-report-x.json`` → ``sde-report-x.sig.json``
    (the same for the report's ``.html`` and ``.pdf``)."""
    p = Path(report_file)
    stem = p.name
    for suffix in (SIGNATURE_SUFFIX, ".json", ".html", ".htm", ".pdf"):
        if stem.lower().endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    return p.with_name(stem + SIGNATURE_SUFFIX)


def signed_message(public_key_b64: str, files: Mapping[str, str]) -> bytes:
    """The bytes the signature covers: canonical JSON of the format, algorithm, key and the
    ``{file name: SHA-256}`` map."""
    body = {
        "format": SIGNATURE_FORMAT,
        "algorithm": _ALGORITHM,
        "public_key": public_key_b64,
        "files": dict(sorted(files.items())),
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")


def sign_files(files: Iterable[str | Path], key: Ed25519PrivateKey, out: str | Path) -> Path:
    """Sign the given files (all in the folder of ``out``) and write the signature to ``out``.

    Args:
        files: the report files (HTML, JSON, PDF); each is named by its file name.
        key: the operator's private key (:func:`load_private_key`).
        out: the signature file (:func:`signature_path`).

    Returns:
        ``out`` as a Path.

    Raises:
        SigningError: a file is missing or lies in another folder than ``out``.
    """
    target = Path(out)
    hashes: dict[str, str] = {}
    for f in files:
        p = Path(f)
        if p.resolve().parent != target.resolve().parent or not p.is_file():
            raise SigningError(
                f"{p} is not a file beside the signature {target}: sign the report's own files"
            )
        hashes[p.name] = file_sha256(p)
    raw = _raw_public(key.public_key())
    public_b64 = base64.b64encode(raw).decode("ascii")
    signature = key.sign(signed_message(public_b64, hashes))
    document = {
        "format": SIGNATURE_FORMAT,
        "format_version": SIGNATURE_FORMAT_VERSION,
        "algorithm": _ALGORITHM,
        "public_key": public_b64,
        "fingerprint": key_fingerprint(raw),
        "files": dict(sorted(hashes.items())),
        "signature": base64.b64encode(signature).decode("ascii"),
    }
    return atomic_write_json(target, document)


@dataclass
class SignatureCheck:
    """The check of one signature file.

    Attributes:
        path: the signature file. fingerprint: the signing key's fingerprint (None when the
            file is unreadable). valid: the signature matches the key and the listed hashes.
        files: ``(file name, "matches" | "CHANGED" | "absent")`` per listed file.
        problems: why the check fails (empty when it passes).
        expected: the fingerprint the reader asked for, if any.
        subject: the file the reader verifies (it must be one of the signed files, unchanged).
        accept_unknown_key: the reader accepts a key they did not name (``expected`` None).
    """

    path: Path
    fingerprint: str | None
    valid: bool
    files: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    expected: str | None = None
    subject: Path | None = None
    accept_unknown_key: bool = False

    @property
    def intact(self) -> bool:
        """The signature matches its key, the subject is one of the signed files, and every
        signed file present is unchanged (whoever the key belongs to)."""
        return self.valid and not self.problems

    @property
    def unknown_key(self) -> bool:
        """No key was expected: the signer is whoever holds this key, which anyone can make."""
        return self.expected is None

    @property
    def ok(self) -> bool:
        """Intact, and signed by the expected key (or an unknown key the reader accepts)."""
        return self.intact and (not self.unknown_key or self.accept_unknown_key)

    def lines(self) -> list[str]:
        """The check as text: one line per file, the key, the verdict."""
        out = [f"signature {self.path}:"]
        out += [f"  {name}: {status}" for name, status in self.files]
        if self.fingerprint:
            pinned = " (the expected key)" if self.expected and self.ok else ""
            out.append(f"  signed with the Ed25519 key {self.fingerprint}{pinned}")
        out += [f"  {p}" for p in self.problems]
        if not self.intact:
            out.append("signature: FAILS")
        elif not self.unknown_key:
            out.append("signature: VALID")
        elif self.accept_unknown_key:
            out.append(
                "signature: VALID for these files, but signed by an unknown key (accepted with "
                "--accept-unknown-key): compare its fingerprint with the one the operator "
                "published"
            )
        else:
            out.append(
                f"signature: signed by an unknown key ({self.fingerprint}): the files are those "
                "this key signed, but anyone can make a key; pass the operator's key with "
                "--expect-key (or --accept-unknown-key to accept it unnamed)"
            )
        return out


def _expected_fingerprint(expected: str) -> str:
    """A fingerprint given as ``SHA256:hex``, bare hex, or a public-key file (PEM/OpenSSH)."""
    text = expected.strip()
    p = Path(text)
    try:
        is_file = p.is_file()
    except (OSError, ValueError):  # a name too long, a NUL byte: a fingerprint, not a file
        is_file = False
    if is_file:
        data = read_regular_file(p, max_bytes=_MAX_KEY_BYTES, what="public key", error=SigningError)
        try:
            if data.lstrip().startswith(b"-----"):
                key: Any = serialization.load_pem_public_key(data)
            else:
                key = serialization.load_ssh_public_key(data)
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise SigningError(f"{p} is not a PEM or OpenSSH public key ({exc})") from exc
        if not isinstance(key, Ed25519PublicKey):
            raise SigningError(f"{p} is not an Ed25519 public key")
        return public_key_fingerprint(key)
    return "SHA256:" + text.removeprefix("SHA256:").lower()


def _read_signature(path: Path) -> dict[str, Any]:
    """The signature document, read within its limits, with the types checked.

    Raises:
        SigningError: missing, not a regular file, too large or deep, not JSON, not a
            signature, or a field of the wrong type.
    """
    if not path.exists() and not path.is_symlink():
        raise SigningError(
            f"{path} does not exist: the report is not signed (sign it with `report --sign-key`)"
            " or give its signature file with --signature"
        )
    try:
        data = read_regular_file(
            path, max_bytes=MAX_SIGNATURE_BYTES, what="signature", error=SigningError
        )
        doc = loads_bounded(data, max_depth=8, what=f"signature {path}", error=SigningError)
    except SigningError as exc:
        raise SigningError(f"cannot read the signature: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != SIGNATURE_FORMAT:
        raise SigningError(f"{path} is not an SDE report signature (format {SIGNATURE_FORMAT})")
    version = doc.get("format_version")
    if isinstance(version, bool) or version != SIGNATURE_FORMAT_VERSION:
        raise SigningError(
            f"{path} has signature format version {str(version)[:20]!r}; this sde_core reads "
            f"{SIGNATURE_FORMAT_VERSION}"
        )
    files = doc.get("files")
    if doc.get("algorithm") != _ALGORITHM or not isinstance(files, dict) or not files:
        raise SigningError(f"{path} is not an Ed25519 signature of report files")
    if not all(isinstance(v, str) for v in files.values()) or len(files) > 64:
        raise SigningError(f"{path} lists its files without SHA-256 hex digests")
    for key in ("public_key", "signature"):
        if not isinstance(doc.get(key), str) or len(doc[key]) > 256:
            raise SigningError(f"{path} holds no valid Ed25519 {key.replace('_', ' ')}")
    return doc


def verify_signature(
    sig_file: str | Path,
    expect_key: str | None = None,
    *,
    subject: str | Path | None = None,
    accept_unknown_key: bool = False,
) -> SignatureCheck:
    """Check a signature file and the files it lists (those beside it).

    Args:
        sig_file: the ``.sig.json`` file.
        expect_key: the key the reader trusts: a fingerprint (``SHA256:…``) or a public-key
            file. Without it the check is not :attr:`~SignatureCheck.ok` (the verdict says
            "signed by an unknown key") unless ``accept_unknown_key``.
        subject: the file the reader verifies (the report's JSON, HTML or PDF): it must be one
            of the signed files, by name, and its bytes must hash to the signed SHA-256 —
            a signature copied beside another file says nothing about that file.
        accept_unknown_key: accept a valid signature by a key the reader did not name.

    Returns:
        The :class:`SignatureCheck`: it fails on a bad signature, a changed file, no listed
        file present, a subject the signature does not cover, or another key than
        ``expect_key``. An absent file is reported, not failed (a reader may hold only the PDF).

    Raises:
        SigningError: the signature file is missing or not a signature (not a regular file,
            over its size or depth limit, a field of the wrong type), or ``expect_key`` is not
            a key.
    """
    path = Path(sig_file)
    doc = _read_signature(path)
    files: dict[str, str] = doc["files"]
    try:
        raw = base64.b64decode(doc["public_key"], validate=True)
        signature = base64.b64decode(doc["signature"], validate=True)
        public = Ed25519PublicKey.from_public_bytes(raw)
    except (binascii.Error, ValueError) as exc:
        raise SigningError(f"{path} holds no valid Ed25519 public key or signature") from exc
    fingerprint = key_fingerprint(raw)
    wanted = _expected_fingerprint(expect_key) if expect_key else None
    check = SignatureCheck(
        path, fingerprint, valid=False, expected=wanted,
        subject=Path(subject) if subject is not None else None,
        accept_unknown_key=accept_unknown_key,
    )  # fmt: skip
    try:
        public.verify(signature, signed_message(doc["public_key"], files))
        check.valid = True
    except InvalidSignature:
        check.problems.append("the signature does not match its key and file list")
    present = 0
    for name, digest in sorted(files.items()):
        p = path.parent / name
        if Path(name).name != name or name in ("", ".", ".."):
            check.problems.append(f"{name!r:.80} is not a plain file name")
            continue
        if not p.is_file():
            check.files.append((name, "absent (not checked)"))
            continue
        present += 1
        same = file_sha256(p) == digest
        check.files.append((name, "matches" if same else "CHANGED since it was signed"))
        if not same:
            check.problems.append(f"{name} differs from the signed file")
    if present == 0:
        check.problems.append("none of the signed files lies beside the signature")
    if check.subject is not None:
        _check_subject(check, files)
    if wanted is not None and wanted != fingerprint:
        check.problems.append(f"signed with another key than the expected {wanted}")
    return check


def _check_subject(check: SignatureCheck, files: Mapping[str, str]) -> None:
    """The file the reader verifies must be one the signature covers, with the signed bytes."""
    subject = check.subject
    assert subject is not None
    name = subject.name
    if name not in files:
        covered = ", ".join(sorted(files))[:300]
        check.problems.append(
            f"{name} is not among the files this signature covers ({covered}): the signature "
            f"is not for {name}"
        )
        return
    beside = (check.path.parent / name).resolve() == subject.resolve()
    if not beside and subject.is_file() and file_sha256(subject) != files[name]:
        check.problems.append(f"{subject} differs from the signed {name}")
