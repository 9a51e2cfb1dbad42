"""The Workspace page (AppTest): uploads are staged and all-or-nothing, TorchScript is never
loaded before the user vouches for that file, SalUn's ``.pth.tar`` is accepted, and a model can
be added to the open workspace."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import pytest
import torch
from helpers.workspaces import MLP_KWARGS, make_workspace
from streamlit.testing.v1 import AppTest

from sde_core.inputs.architectures import build_model
from sde_core.pipeline.workspace_load import load_workspace

APP = Path(__file__).resolve().parents[2] / "app.py"
OCTET = "application/octet-stream"


@pytest.fixture
def base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A valid tiny workspace (MLP 4→8→3) opened by the app; tmp_path is the allowed root."""
    root = tmp_path / "existing"
    root.mkdir()
    make_workspace(root)
    monkeypatch.setenv("SDE_WORKSPACE", str(root))
    monkeypatch.setenv("SDE_DATA_ROOTS", str(tmp_path))
    return root


def page() -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.switch_page("pages/workspace.py")
    return at.run()


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def mlp_bytes(seed: int, wrap: bool = False) -> bytes:
    torch.manual_seed(seed)
    state = build_model("mlp", **MLP_KWARGS).state_dict()
    buffer = io.BytesIO()
    torch.save({"state_dict": state, "epoch": 5, "best_acc": 91.0} if wrap else state, buffer)
    return buffer.getvalue()


def scripted_bytes() -> bytes:
    """A TorchScript archive, as ``torch.jit.save`` writes it."""
    torch.manual_seed(0)
    buffer = io.BytesIO()
    with warnings.catch_warnings():  # torch.jit is deprecated but still writes archives
        warnings.simplefilter("ignore", FutureWarning)
        torch.jit.save(torch.jit.script(build_model("mlp", **MLP_KWARGS).eval()), buffer)
    return buffer.getvalue()


def fill(at: AppTest, folder: str, base: Path, models: list[tuple[str, bytes]]) -> AppTest:
    at.text_input(key="b_folder").set_value(folder)
    at.selectbox(key="b_kind").set_value("npz")
    at.text_input(key="b_root").set_value(str(base / "data.npz"))
    at.file_uploader[0].set_value(("forget.npy", (base / "forget.npy").read_bytes(), OCTET))
    at.file_uploader[1].set_value([(name, data, OCTET) for name, data in models])
    return at.run()


def test_rejected_upload_with_overwrite_changes_nothing(base: Path):
    before = snapshot(base)
    at = fill(page(), "existing", base, [("final.safetensors", b"garbage"),
                                         ("ok.pth", mlp_bytes(1))])  # fmt: skip
    at.checkbox(key="b_overwrite").check().run()
    at.button(key="b_save").click().run()
    assert not at.exception
    assert any("checkpoint final.safetensors" in e.value for e in at.error)
    assert not any("Saved" in s.value for s in at.success)
    assert snapshot(base) == before  # the existing models/final.safetensors survived
    assert sorted(p.name for p in base.iterdir()) == ["data.npz", "forget.npy", "models",
                                                       "workspace.toml"]  # fmt: skip


def test_torchscript_is_loaded_only_when_trusted(base: Path, monkeypatch: pytest.MonkeyPatch):
    calls: list[str] = []
    real = torch.jit.load

    def spy(*args, **kwargs):
        calls.append(str(args[0]))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.jit, "load", spy)
    at = fill(page(), "scripted", base, [("scripted.pt", scripted_bytes())])
    assert any("TorchScript archive" in w.value for w in at.warning)
    at.button(key="b_save").click().run()
    assert any("TorchScript archive" in e.value and "not loaded" in e.value for e in at.error)
    assert calls == [] and not (base.parent / "scripted").exists()
    at.checkbox(key="b_model_trusted_0").check().run()
    assert at.number_input(key="b_model_limit_0").value == 600.0  # the limit is shown
    at.button(key="b_save").click().run()
    assert not at.exception and any("Saved" in s.value for s in at.success), [
        e.value for e in at.error
    ]
    assert calls == [], "a trusted file is loaded only in the isolated child, not the server"
    entry = load_workspace(base.parent / "scripted").models[0]
    assert entry.trusted and entry.checkpoint == "models/scripted.pt"
    assert "trusted = true" in (base.parent / "scripted" / "workspace.toml").read_text()


def test_pth_tar_upload_and_add_a_model(base: Path, monkeypatch: pytest.MonkeyPatch):
    at = fill(page(), "salun", base, [("original.pth.tar", mlp_bytes(2, wrap=True))])
    at.button(key="b_save").click().run()
    assert any("Saved" in s.value for s in at.success), [e.value for e in at.error]
    built = load_workspace(base.parent / "salun")
    assert [(m.name, m.role, m.arch) for m in built.models] == [("original", "original", "mlp")]
    assert built.defaults.subset_size == 5  # the null check needs two subsets of n in D_te/2
    monkeypatch.setenv("SDE_WORKSPACE", str(base.parent / "salun"))
    at = page()
    at.file_uploader[2].set_value(("ga_model.pt", mlp_bytes(3), OCTET)).run()
    at.text_input(key="a_model_name").set_value("GA").run()
    at.button(key="a_save").click().run()
    assert not at.exception and any("Added" in s.value for s in at.success), [
        e.value for e in at.error
    ]
    ws = load_workspace(base.parent / "salun")
    assert [m.name for m in ws.models] == ["original", "GA"]
    assert ws.model("GA").checkpoint == "models/GA/ga_model.pt"
