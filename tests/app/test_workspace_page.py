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
    assert any("Model file final.safetensors" in e.value for e in at.error)
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
    at.button(key="b_save").click().run()  # an untrained "original": refused, and why
    said = " ".join(e.value for e in at.error)
    assert not any("Saved" in s.value for s in at.success), said
    assert "better than chance" in said and "Check its accuracy" in said, said
    assert not (base.parent / "salun" / "workspace.toml").exists()
    at.checkbox(key="b_model_accuracy_0").uncheck().run()  # the user vouches for it
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


def test_a_relative_dataset_path_is_read_as_typed_and_its_absolute_path_is_shown(
    base: Path, monkeypatch: pytest.MonkeyPatch
):
    """Relative to the first allowed folder (here ``SDE_DATA_ROOTS``), not to the new
    workspace folder; the page says which absolute path it resolved to."""
    at = fill(page(), "typed", base, [("original.pth", mlp_bytes(4))])
    at.checkbox(key="b_model_accuracy_0").uncheck().run()  # untrained: no accuracy to check
    at.text_input(key="b_root").set_value("existing/data.npz").run()
    at.button(key="b_save").click().run()
    assert not at.exception and any("Saved" in s.value for s in at.success), [
        e.value for e in at.error
    ]
    resolved = (base / "data.npz").resolve()
    assert any(str(resolved) in i.value for i in at.info), [i.value for i in at.info]
    built = load_workspace(base.parent / "typed")
    assert Path(built.dataset_spec().root) == resolved  # outside the new folder: absolute
    # the same text read against the new folder would have been typed/existing/data.npz
    assert not (base.parent / "typed" / "existing").exists()


def test_every_problem_of_the_form_is_shown_at_once_by_its_label(base: Path):
    at = page()
    at.text_input(key="b_folder").set_value("../outside").run()
    at.selectbox(key="b_kind").set_value("npz")
    at.text_input(key="b_root").set_value("missing/data.npz")
    at.file_uploader[1].set_value([("model.pt", b"x", OCTET)]).run()
    at.text_input(key="b_model_kwargs_0").set_value("[1, 2]").run()
    at.button(key="b_save").click().run()
    assert not at.exception
    errors = [e.value for e in at.error]
    labels = [e.split(" — ", 1)[0] for e in errors]
    assert labels == [
        "**Model file model.pt**",  # the form's own check: kwargs that are not a JSON object
        "**New workspace folder**",
        "**Dataset folder or file**",
        "**Forget set**",
    ], errors
    plain = [e.replace("\\", "") for e in errors]  # markdown escapes
    assert "must be a JSON object, e.g." in plain[0]  # each message says the fix
    assert "give a path without parent references" in plain[1]
    missing = base.parent.resolve() / "missing" / "data.npz"  # read as typed, not in the folder
    assert f"{missing} does not exist: check the spelling" in plain[2]
    assert "upload the forget set (.npy" in plain[3]
    assert any("4 problems to fix" in m.value for m in at.markdown)
    assert not any("forget_indices" in e or "**workspace folder**" in e for e in errors)


def test_the_guide_is_linked_from_the_build_form(base: Path):
    at = page()
    guide = at.selectbox(key="guide_section")
    assert guide.value == "Where files may live: the path policy"
    assert "Forget sets and index conventions" in guide.options
    texts = " ".join(m.value for m in at.markdown)
    assert "SDE_DATA_ROOTS" in texts  # the section's own text, rendered offline
    guide.set_value("Forget sets and index conventions").run()
    assert any("forget" in m.value.lower() and "index" in m.value.lower() for m in at.markdown)
