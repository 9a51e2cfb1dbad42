"""Ed25519 signatures of report files (sde_core.services.signing) and ``verify``'s check of them:
a signed report verifies and names its key; one changed byte, another key, a forged signature
or a damaged signature file fails; keys are read the way OpenSSL and ssh-keygen write them."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sde_core.cli import main
from sde_core.errors import SigningError
from sde_core.services.signing import (
    key_fingerprint,
    load_private_key,
    public_key_fingerprint,
    sign_files,
    signature_path,
    verify_signature,
)


def _pem(key, password: bytes | None = None) -> bytes:
    encryption = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


@pytest.fixture
def report(tmp_path: Path) -> tuple[list[Path], Path, Ed25519PrivateKey]:
    """Three report files, signed; returns (files, signature, key)."""
    files = []
    for suffix, content in ((".json", b'{"format": "sde-report"}\n'), (".html", b"<html>x</html>"),
                            (".pdf", b"%PDF-1.7 " + bytes(range(256)) * 20)):  # fmt: skip
        p = tmp_path / f"sde-report-demo{suffix}"
        p.write_bytes(content)
        files.append(p)
    key = Ed25519PrivateKey.generate()
    sig = sign_files(files, key, signature_path(files[0]))
    return files, sig, key


def test_a_signed_report_verifies_and_names_its_key(report):
    _, sig, key = report
    assert sig.name == "sde-report-demo.sig.json"
    check = verify_signature(sig, expect_key=public_key_fingerprint(key))
    assert check.ok and check.valid
    assert check.fingerprint == public_key_fingerprint(key)
    assert [status for _, status in check.files] == ["matches"] * 3
    assert any(check.fingerprint in line for line in check.lines())
    assert check.lines()[-1] == "signature: VALID"
    # the fingerprint is SHA-256 of the raw public key, computed independently here
    import hashlib

    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert check.fingerprint == "SHA256:" + hashlib.sha256(raw).hexdigest() == key_fingerprint(raw)
    assert verify_signature(sig, expect_key=check.fingerprint).ok


@pytest.mark.parametrize("which", [0, 1, 2])
def test_one_changed_byte_of_any_signed_file_fails(report, which):
    files, sig, _ = report
    data = bytearray(files[which].read_bytes())
    data[len(data) // 2] ^= 0x01
    files[which].write_bytes(bytes(data))
    check = verify_signature(sig, accept_unknown_key=True)
    assert not check.ok and check.valid  # the signature itself is fine; the file is not
    assert dict(check.files)[files[which].name].startswith("CHANGED")


def test_another_key_a_forged_list_or_no_file_fails(report, tmp_path):
    files, sig, _ = report
    other = Ed25519PrivateKey.generate()
    assert not verify_signature(sig, expect_key=public_key_fingerprint(other)).ok
    pub = tmp_path / "operator.pub"
    pub.write_bytes(
        other.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
    )
    assert "another key" in " ".join(verify_signature(sig, expect_key=str(pub)).problems)
    doc = json.loads(sig.read_text())
    doc["files"][files[2].name] = "0" * 64  # claims another PDF: the signature no longer fits
    sig.write_text(json.dumps(doc))
    forged = verify_signature(sig)
    assert not forged.valid and not forged.ok
    doc["signature"] = base64.b64encode(b"\0" * 64).decode()
    sig.write_text(json.dumps(doc))
    assert not verify_signature(sig).valid
    for f in files:
        f.unlink()
    assert "none of the signed files" in " ".join(verify_signature(sig).problems)


def test_damaged_or_missing_signature_files_are_named(tmp_path, report):
    _, sig, _ = report
    with pytest.raises(SigningError, match="does not exist"):
        verify_signature(tmp_path / "nope.sig.json")
    sig.write_text("{not json")
    with pytest.raises(SigningError, match="cannot read"):
        verify_signature(sig)
    sig.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(SigningError, match="not an SDE report signature"):
        verify_signature(sig)


def test_keys_as_openssl_and_ssh_keygen_write_them(tmp_path, monkeypatch):
    key = Ed25519PrivateKey.generate()
    pem = tmp_path / "op.pem"
    pem.write_bytes(_pem(key))
    assert public_key_fingerprint(load_private_key(pem)) == public_key_fingerprint(key)
    ssh = tmp_path / "id_ed25519"
    ssh.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
    )
    assert public_key_fingerprint(load_private_key(ssh)) == public_key_fingerprint(key)
    locked = tmp_path / "locked.pem"
    locked.write_bytes(_pem(key, b"s3cret"))
    with pytest.raises(SigningError, match="SDE_SIGN_KEY_PASSWORD"):
        load_private_key(locked)
    with pytest.raises(SigningError, match="password is wrong"):
        load_private_key(locked, b"wrong")
    assert public_key_fingerprint(load_private_key(locked, b"s3cret")) == public_key_fingerprint(
        key
    )
    ec_key = tmp_path / "ec.pem"
    ec_key.write_bytes(_pem(ec.generate_private_key(ec.SECP256R1())))
    with pytest.raises(SigningError, match="not an Ed25519 key"):
        load_private_key(ec_key)
    junk = tmp_path / "junk.pem"
    junk.write_text("hello")
    with pytest.raises(SigningError, match="neither a PEM nor an OpenSSH"):
        load_private_key(junk)
    with pytest.raises(SigningError, match="cannot read the signing key"):
        load_private_key(tmp_path / "missing.pem")


def test_verify_signature_only_from_the_command_line(report, capsys):
    files, sig, key = report
    pinned = ["--expect-key", public_key_fingerprint(key)]
    assert main(["verify", str(files[2]), "--signature-only", *pinned]) == 0  # the PDF will do
    out = capsys.readouterr().out
    assert "signature: VALID" in out and public_key_fingerprint(key) in out
    pdf = bytearray(files[2].read_bytes())
    pdf[100] ^= 0xFF
    files[2].write_bytes(bytes(pdf))
    assert main(["verify", str(files[0]), "--signature-only"]) == 1
    assert "sde-report-demo.pdf: CHANGED" in capsys.readouterr().out
    sig.unlink()
    assert main(["verify", str(files[0]), "--signature-only"]) == 1  # nothing to check: fails
    assert "does not exist" in capsys.readouterr().err


def test_a_signature_copied_beside_a_forged_report_fails(report, capsys):
    """Issue 31 item 4: a genuine X.sig.json copied to FINAL.sig.json, FINAL.json forged, the
    signed X.html kept beside: the signature is not for FINAL.json."""
    files, sig, key = report
    final = files[0].with_name("FINAL.json")
    final.write_text('{"format": "sde-report", "forged": true}\n')
    copy = final.with_name("FINAL.sig.json")
    copy.write_bytes(sig.read_bytes())
    pinned = ["--expect-key", public_key_fingerprint(key)]
    assert main(["verify", str(final), "--signature-only", *pinned]) == 1
    out = capsys.readouterr().out
    assert "FINAL.json is not among the files this signature covers" in out
    assert out.strip().endswith("signature: FAILS")
    # the same file under the signed name, elsewhere: its bytes must be the signed ones
    elsewhere = final.parent / "other"
    elsewhere.mkdir()
    forged = elsewhere / files[0].name
    forged.write_text('{"format": "sde-report", "forged": true}\n')
    check = verify_signature(sig, public_key_fingerprint(key), subject=forged)
    assert not check.ok and any("differs from the signed" in p for p in check.problems)
    assert verify_signature(sig, public_key_fingerprint(key), subject=files[1]).ok


def test_without_an_expected_key_the_signer_is_unknown(report, capsys):
    """A valid signature by a key nobody named is "signed by an unknown key", exit 1, unless the
    reader accepts it explicitly."""
    files, sig, _ = report
    check = verify_signature(sig, subject=files[0])
    assert check.intact and check.unknown_key and not check.ok
    assert "signed by an unknown key" in check.lines()[-1]
    assert main(["verify", str(files[0]), "--signature-only"]) == 1
    out = capsys.readouterr().out
    assert "signature: signed by an unknown key" in out and "VALID" not in out
    assert main(["verify", str(files[0]), "--signature-only", "--accept-unknown-key"]) == 0
    assert "signed by an unknown key (accepted" in capsys.readouterr().out


def test_an_old_signature_still_verifies(tmp_path):
    """The signed message is unchanged (format_version 1): a signature written by the previous
    release, recreated here byte for byte, verifies."""
    report_file = tmp_path / "sde-report-old.json"
    report_file.write_bytes(b'{"format": "sde-report"}\n')
    key = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    public_b64 = base64.b64encode(raw).decode()
    import hashlib

    files = {report_file.name: hashlib.sha256(report_file.read_bytes()).hexdigest()}
    body = {"format": "sde-report-signature", "algorithm": "Ed25519", "public_key": public_b64,
            "files": files}  # fmt: skip
    message = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    doc = {"format": "sde-report-signature", "format_version": 1, "algorithm": "Ed25519",
           "public_key": public_b64, "fingerprint": key_fingerprint(raw), "files": files,
           "signature": base64.b64encode(key.sign(message)).decode()}  # fmt: skip
    sig = tmp_path / "sde-report-old.sig.json"
    sig.write_text(json.dumps(doc, indent=2))
    assert verify_signature(sig, key_fingerprint(raw), subject=report_file).ok


@pytest.mark.parametrize(
    "content, message",
    [
        ("[" * 30_000 + "]" * 30_000, "nested 30000 levels deep"),
        ('{"format": "sde-report-signature", "n": ' + "9" * 5000 + "}", "5000 digits"),
        ('{"format": "sde-report-signature", "format_version": true}', "format version"),
        (
            '{"format": "sde-report-signature", "format_version": 1, "algorithm": "Ed25519",'
            ' "files": {"a.json": 5}, "public_key": "", "signature": ""}',
            "without SHA-256",
        ),
        (
            '{"format": "sde-report-signature", "format_version": 1, "algorithm": "Ed25519",'
            ' "files": {"a.json": "00"}, "public_key": 12345, "signature": ""}',
            "no valid Ed25519 public key",
        ),
        ("x" * 100_000, "at most 65536"),
    ],
)
def test_hostile_signature_files_are_one_line_errors(tmp_path, content, message):
    sig = tmp_path / "r.sig.json"
    sig.write_text(content)
    with pytest.raises(SigningError, match=message):
        verify_signature(sig)


@pytest.mark.timeout(20)
def test_a_fifo_or_a_device_as_the_signature_is_refused_at_once(tmp_path, capsys):
    """A FIFO would block the read forever and /dev/zero would read until memory runs out:
    both are refused before they are opened for reading."""
    import os

    fifo = tmp_path / "fifo.sig.json"
    os.mkfifo(fifo)
    with pytest.raises(SigningError, match="not a regular file"):
        verify_signature(fifo)
    zero = tmp_path / "zero.sig.json"
    zero.symlink_to("/dev/zero")
    with pytest.raises(SigningError, match="not a regular file"):
        verify_signature(zero)
    report_file = tmp_path / "zero.json"
    report_file.write_text("{}")
    assert main(["verify", str(report_file), "--signature-only"]) == 1
    assert "not a regular file" in capsys.readouterr().err
    beside_fifo = tmp_path / "fifo.json"  # a full verify finds the FIFO beside the report
    beside_fifo.write_text("{}")
    assert main(["verify", str(beside_fifo)]) == 1
    assert "not a regular file" in capsys.readouterr().err
