"""Trust belongs to the person running the tool (issue 31, items 6 and 9): a received
``workspace.toml`` that says ``trusted = true`` with matching hashes runs nothing by itself; the
opt-in is the local trust store, keyed by the SHA-256 of the code that runs — for a
``file:net.py:Net`` class the file and every module beside it, so editing a neighbour after trust
refuses until it is trusted again; an inline ``#sha256=`` pin that disagrees with the file
refuses even when ``arch_sha256`` matches.

The architecture file is real code: it imports a neighbour module that writes a marker file when
it runs, so "nothing ran" is observed, not assumed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers.workspaces import MLP_KWARGS
from safetensors.torch import save_file

from sde_core.cli import main
from sde_core.common.trust_store import TRUST_STORE_ENV, is_trusted, trust, trusted_entries
from sde_core.errors import CheckpointError, InputError, WorkspaceError
from sde_core.inputs.architectures import build_model
from sde_core.inputs.external_archs import MAX_CODE_FILES, code_digest
from sde_core.pipeline.local_trust import model_code, require_local_trust
from sde_core.pipeline.model_inputs import load_entry_model
from sde_core.pipeline.workspace_checks import validate_workspace
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.pipeline.workspace_write import write_workspace
from sde_core.services.workspace_models import ModelSpec, add_model

NET = (
    "from helper import announce\nfrom sde_core.inputs.architectures import MLP\n\n"
    "announce()\n\n\nclass Net(MLP):\n    pass\n"
)


def _helper(marker: Path, extra: str = "") -> str:
    return f"def announce():\n    open({str(marker)!r}, 'a').write('ran\\n')\n{extra}"


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own trust store (the person running the tool)."""
    path = tmp_path / "mine" / "trusted.json"
    monkeypatch.setenv(TRUST_STORE_ENV, str(path))
    return path


@pytest.fixture
def own_class(ws_root: Path, tmp_path: Path, store: Path) -> dict[str, Path]:
    """A workspace with model 'own' built by file:code/net.py:Net (which imports helper.py),
    added with --trusted by its author."""
    marker = tmp_path / "ran.txt"
    code = ws_root / "code"
    code.mkdir()
    (code / "net.py").write_text(NET)
    (code / "helper.py").write_text(_helper(marker))
    save_file(build_model("mlp", **MLP_KWARGS).state_dict(), ws_root / "models" / "own.safetensors")
    spec = ModelSpec(
        name="own", role="unlearned", arch=f"file:{code / 'net.py'}:Net",
        arch_kwargs=dict(MLP_KWARGS), trusted=True,
    )  # fmt: skip
    add_model(ws_root, spec, checkpoint=ws_root / "models" / "own.safetensors")
    return {"ws": ws_root, "code": code, "marker": marker}


def _load_own(ws_root: Path) -> torch.nn.Module:
    ws = load_workspace(ws_root, validate=False)
    return load_entry_model(ws, ws.model("own"))


def test_a_received_workspace_trusts_nothing_by_itself(
    own_class: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws_root, marker = own_class["ws"], own_class["marker"]
    toml = (ws_root / "workspace.toml").read_text()
    assert "trusted = true" in toml and "arch_sha256" in toml  # what the sender's file says
    assert _load_own(ws_root) is not None and marker.exists()  # the author's own machine
    marker.unlink()  # (the class stays imported in this process: its content is the same)
    # the same folder on someone else's machine: an empty trust store
    monkeypatch.setenv(TRUST_STORE_ENV, str(tmp_path / "receiver" / "trusted.json"))
    with pytest.raises(WorkspaceError, match="not trusted on this machine") as err:
        _load_own(ws_root)
    text = str(err.value)
    assert "nothing of it was run" in text and f"workspace trust {ws_root} --model own" in text
    assert not marker.exists()
    ws = load_workspace(ws_root)  # loading and validating still work: a warning, not an error
    warnings = [p for p in validate_workspace(ws) if p.field.endswith(".trusted")]
    assert warnings and warnings[0].severity == "warning"
    assert not marker.exists()
    # the receiver reads the files, then trusts them from the command line
    assert main(["workspace", "trust", str(ws_root), "--model", "own", "--list"]) == 0
    assert not (tmp_path / "receiver" / "trusted.json").exists()  # --list writes nothing
    assert main(["workspace", "trust", str(ws_root), "--model", "own"]) == 0
    assert _load_own(ws_root) is not None
    assert main(["workspace", "trust", str(ws_root), "--untrust"]) == 0
    with pytest.raises(WorkspaceError, match="not trusted on this machine"):
        _load_own(ws_root)


def test_editing_a_neighbour_module_after_trust_refuses(own_class: dict[str, Path]) -> None:
    ws_root, code, marker = own_class["ws"], own_class["code"], own_class["marker"]
    before = (code / "helper.py").read_text()
    (code / "helper.py").write_text(_helper(marker, "import os\nos.system('true')\n"))
    with pytest.raises(CheckpointError, match="or a Python module beside it, changed since"):
        _load_own(ws_root)
    assert not marker.exists()
    # a new module in a sub-package counts too; compiled caches do not
    (code / "helper.py").write_text(before)
    digest = code_digest(code / "net.py")
    (code / "__pycache__").mkdir(exist_ok=True)
    (code / "__pycache__" / "helper.cpython-311.pyc").write_bytes(b"cache")
    assert code_digest(code / "net.py") == digest
    (code / "pkg").mkdir()
    (code / "pkg" / "evil.py").write_text("raise SystemExit\n")
    assert code_digest(code / "net.py") != digest
    with pytest.raises(CheckpointError, match="changed since it was trusted"):
        _load_own(ws_root)
    (code / "pkg" / "evil.py").unlink()
    assert _load_own(ws_root) is not None  # back to what was trusted


def test_an_inline_pin_that_disagrees_with_the_file_refuses(own_class: dict[str, Path]) -> None:
    ws_root = own_class["ws"]
    ws = load_workspace(ws_root, validate=False)
    entry = ws.model("own")
    assert code_digest(own_class["code"] / "net.py") == entry.arch_sha256  # still matches
    entry.arch = f"{entry.arch}#sha256={'0' * 64}"
    write_workspace(ws)
    with pytest.raises(CheckpointError, match=r"pins code/net\.py to SHA-256 000000000000"):
        _load_own(ws_root)
    assert not own_class["marker"].exists()


def test_a_received_code_checkpoint_is_refused_until_trusted_locally(
    ws_root: Path, store: Path
) -> None:
    scripted = torch.jit.script(build_model("mlp", **MLP_KWARGS))
    scripted.save(str(ws_root / "models" / "scripted.pt"))
    ws = load_workspace(ws_root)
    text = (ws_root / "workspace.toml").read_text()
    text += (
        '\n[[models]]\nname = "sent"\nrole = "unlearned"\ncheckpoint = "models/scripted.pt"\n'
        "trusted = true\n"
    )
    (ws_root / "workspace.toml").write_text(text)
    ws = load_workspace(ws_root)
    entry = ws.model("sent")
    with pytest.raises(WorkspaceError, match=r"scripted\.pt: a TorchScript archive"):
        load_entry_model(ws, entry)
    [piece] = model_code(ws, entry)
    assert not is_trusted(piece.sha256)
    trust(piece.sha256, "read it")
    require_local_trust(ws, entry)  # the gate opens (the child then loads it: test_model_inputs)
    # the trusted bytes changed: refused again
    file = ws_root / "models" / "scripted.pt"
    file.write_bytes(file.read_bytes() + b"\0")
    with pytest.raises(WorkspaceError, match="not trusted on this machine"):
        load_entry_model(load_workspace(ws_root, validate=False), entry)


def test_the_trust_store_is_read_with_limits(store: Path) -> None:
    store.parent.mkdir(parents=True)
    for content in ("{", "[]", json.dumps({"format": "x", "trusted": {}}), "\ud800"):
        store.write_text(content, encoding="utf-8", errors="surrogatepass")
        with pytest.raises(InputError, match=rf"trust store {store}"):
            trusted_entries()
    store.unlink()
    store.mkdir()
    with pytest.raises(InputError, match="not a regular file"):
        is_trusted("a" * 64)
    store.rmdir()
    with pytest.raises(InputError, match="hex SHA-256"):
        trust("not a hash", "x")
    trust("a" * 64, "label")
    assert is_trusted("a" * 64) and not is_trusted("b" * 64) and not is_trusted(None)


def test_a_crowded_architecture_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "net.py").write_text("")
    for i in range(MAX_CODE_FILES):
        (tmp_path / f"m{i}.py").write_text("")
    with pytest.raises(CheckpointError, match="in a folder of their own"):
        code_digest(tmp_path / "net.py")
