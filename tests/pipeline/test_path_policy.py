"""The one path policy (issue 12): files a workspace names must lie inside the workspace folder
or an allowed root, on every entry point (library, CLI, dashboard), and refusals never show the
content of the file they point to."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from helpers.designs import FIXED_FLAGS, fixed_settings
from helpers.workspaces import make_workspace
from streamlit.testing.v1 import AppTest

from sde_core.cli import main
from sde_core.common.paths import allowed_roots, env_roots, resolve_in_roots
from sde_core.errors import PathError, WorkspaceError
from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
from sde_core.pipeline.workspace_checks import validate_workspace
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.pipeline.workspace_write import write_workspace

APP = Path(__file__).resolve().parents[2] / "app.py"
SECRET = "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
LEAKS = ("root:x", "/bin/bash", "daemon", "nologin")
FAST = [
    "--subset-size",
    "10",
    "--targets",
    "4",
    "--splits",
    "4",
    "--panel-size",
    "20",
    *FIXED_FLAGS,
]


def no_leak(text: str) -> None:
    assert not [w for w in LEAKS if w in text], text


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "passwd").write_text(SECRET)
    return folder


@pytest.fixture
def symlinked_forget(tmp_path: Path, outside: Path) -> Path:
    """A valid workspace whose forget file is a symlink to a passwd-like file outside it."""
    root = tmp_path / "ws"
    root.mkdir()
    ws = make_workspace(root)
    (root / "forget.txt").symlink_to(outside / "passwd")
    ws.forget_indices = "forget.txt"
    write_workspace(ws)
    return root


@pytest.fixture
def outside_checkpoint(tmp_path: Path, outside: Path) -> Path:
    """A valid workspace whose original's checkpoint lies outside (absolute path)."""
    root = tmp_path / "ws2"
    root.mkdir()
    ws = make_workspace(root)
    shutil.copy(root / "models" / "final.safetensors", outside / "final.safetensors")
    ws.models[0].checkpoint = str(outside / "final.safetensors")
    write_workspace(ws)
    return root


@pytest.fixture(autouse=True)
def no_env_roots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SDE_DATA_ROOTS", raising=False)


# ------------------------------------------------------------------------------- the policy


def test_resolve_in_roots_refuses_escapes(tmp_path: Path, outside: Path):
    root = (tmp_path / "root").resolve()
    root.mkdir()
    (root / "link").symlink_to(outside / "passwd")
    (root / "loop").symlink_to(root / "loop")
    cases = [
        ("link", "outside the allowed folders"),
        (str(outside / "passwd"), "outside the allowed folders"),
        ("a/../b", "'..'"),
        ("bad\x00name", "NUL byte"),
        ("x" * 300, "the file system allows 255"),
        ("/".join(["d"] * 3000), "longer than 4096 bytes"),
        (5, "must be a path string"),
        ("", "empty"),
        ("loop", "cannot be resolved|outside|does not exist"),
    ]
    for path, match in cases:
        with pytest.raises(PathError, match=match):
            resolve_in_roots(path, [root], what="file")
    assert resolve_in_roots("new.txt", [root], must_exist=False) == root / "new.txt"


def test_roots_come_from_the_environment(tmp_path: Path):
    env = {"SDE_DATA_ROOTS": os.pathsep.join([str(tmp_path / "a"), "rel"])}
    assert env_roots(env, cwd=tmp_path) == [
        (tmp_path / "a").resolve(),
        (tmp_path / "rel").resolve(),
    ]
    assert env_roots({}, cwd=tmp_path) == []
    assert allowed_roots({}, cwd=tmp_path) == [tmp_path.resolve(), (tmp_path / "assets").resolve()]


# ------------------------------------------------------------------------------- library


@pytest.mark.parametrize("fixture", ["symlinked_forget", "outside_checkpoint"])
def test_library_refuses_and_never_reads_the_target(fixture: str, request: pytest.FixtureRequest):
    root = request.getfixturevalue(fixture)
    with pytest.raises(WorkspaceError, match="outside the allowed folders") as info:
        load_workspace(root)
    no_leak(str(info.value))
    with pytest.raises(WorkspaceError, match="outside the allowed folders"):
        evaluate_workspace(root, fixed_settings(subset_size=8, targets=4, splits=4))
    ws = load_workspace(root, validate=False)  # parsing alone reads no named file
    field = "forget_indices" if fixture == "symlinked_forget" else "models[0].checkpoint"
    problems = [p for p in validate_workspace(ws) if p.field == field]
    assert problems and "outside the allowed folders" in problems[0].message
    no_leak(" ".join(p.message for p in validate_workspace(ws)))
    with pytest.raises(WorkspaceError, match="outside"):
        evaluate_workspace(ws, fixed_settings(subset_size=8, targets=4, splits=4))


def test_an_allowed_root_admits_the_outside_file(outside_checkpoint: Path, outside: Path):
    assert load_workspace(outside_checkpoint, roots=[outside]).models[0].name == "original"
    os.environ["SDE_DATA_ROOTS"] = str(outside)
    try:
        assert load_workspace(outside_checkpoint).models[0].checkpoint.endswith("final.safetensors")
    finally:
        del os.environ["SDE_DATA_ROOTS"]


def test_parent_references_and_odd_toml_values(tmp_path: Path):
    root = tmp_path / "ws"
    root.mkdir()
    ws = make_workspace(root)
    text = (root / "workspace.toml").read_text()
    (root / "workspace.toml").write_text(
        text.replace('root = "data.npz"', 'root = "../ws/data.npz"')
    )
    with pytest.raises(WorkspaceError, match=r"'\.\.'"):
        load_workspace(root)
    (root / "workspace.toml").write_text(text.replace('root = "data.npz"', "root = 5"))
    with pytest.raises(WorkspaceError, match="root must be a path string"):
        load_workspace(root)
    (root / "workspace.toml").write_text(text + "deep = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(WorkspaceError):
        load_workspace(root)
    write_workspace(ws)
    with pytest.raises(WorkspaceError, match="NUL byte"):
        load_workspace(str(root) + "\x00x")
    with pytest.raises(WorkspaceError, match="255"):
        load_workspace(root / ("n" * 400))


# ------------------------------------------------------------------------------- CLI


def _error_line(capsys: pytest.CaptureFixture) -> str:
    """The one ``error:`` line (a command may print what it starts doing before it)."""
    captured = capsys.readouterr()
    errors = [line for line in captured.err.strip().splitlines() if line.startswith("error")]
    assert len(errors) == 1 and errors[0].startswith("error: "), captured.err
    no_leak(captured.out + captured.err)
    return errors[0]


@pytest.mark.parametrize("fixture", ["symlinked_forget", "outside_checkpoint"])
def test_cli_refuses_on_every_command(fixture, request, capsys, tmp_path):
    root = request.getfixturevalue(fixture)
    assert main(["evaluate", str(root), "--json", str(tmp_path / "o.json"), *FAST]) == 1
    assert "outside the allowed folders" in _error_line(capsys)
    assert main(["workspace", "validate", str(root)]) == 1
    captured = capsys.readouterr()
    assert "outside the allowed folders" in captured.err
    no_leak(captured.out + captured.err)
    assert main(["unlearn", str(root), "--method", "ft", "--name", "x"]) == 1
    _error_line(capsys)
    assert not (tmp_path / "o.json").exists()


# ------------------------------------------------------------------------------- dashboard


def _page(monkeypatch: pytest.MonkeyPatch, root: Path, page: str) -> AppTest:
    monkeypatch.setenv("SDE_WORKSPACE", str(root))
    monkeypatch.setenv("SDE_DATA_ROOTS", str(root))
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.switch_page(f"pages/{page}.py")
    return at.run()


@pytest.mark.parametrize("fixture", ["symlinked_forget", "outside_checkpoint"])
@pytest.mark.parametrize("page", ["workspace", "compare", "explore"])
def test_dashboard_refuses_and_shows_no_content(fixture, page, request, monkeypatch):
    root = request.getfixturevalue(fixture)
    at = _page(monkeypatch, root, page)
    assert not at.exception, [e.value for e in at.exception]
    shown = " ".join(e.value for e in [*at.error, *at.warning])
    assert "outside the allowed folders" in shown
    no_leak(shown + " ".join(str(m.value) for m in at.markdown))
    assert not at.metric  # nothing was evaluated


def test_a_linked_workspace_opens_the_folder_the_check_approved(tmp_path, monkeypatch):
    """``?ws=twin`` with ``twin`` both in $SDE_DATA_ROOTS and in the working directory: the
    session keeps the resolved folder inside the roots, as the "Open folder" button does."""
    roots, cwd = tmp_path / "roots", tmp_path / "cwd"
    for folder, name in ((roots / "twin", "inside"), (cwd / "twin", "outside")):
        folder.mkdir(parents=True)
        ws = make_workspace(folder)
        ws.name = name
        write_workspace(ws)
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("SDE_DATA_ROOTS", str(roots))
    monkeypatch.setenv("SDE_WORKSPACE", str(roots / "twin"))
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.switch_page("pages/compare.py")
    at.query_params.update({"ws": "twin"})
    at.run()
    assert at.session_state["ws_path"] == str((roots / "twin").resolve())
    assert not at.exception, [e.value for e in at.exception]
