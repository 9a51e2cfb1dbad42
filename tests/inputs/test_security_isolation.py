"""Every trusted load runs in the isolated child, under its time and memory limit (issue 20).

The attack files are real: TorchScript archives whose ``forward`` or ``__setstate__`` never
returns, and ``torch.save`` pickles whose unpickling double-forks a process that would write a
file 30 s later, or allocates 64 GiB. Each entry point that loads a model — ``workspace
add-model`` (CLI), the Workspace page's add and build tabs (their service functions),
``evaluate``, layer listing and ``unlearn`` — must stop them within the limit, with every process
they started, and report a clean error. Limits are 2 s so the tests stay fast.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from pathlib import Path

import pytest
import torch
from helpers.designs import FIXED_FLAGS
from torch import nn

from sde_core.cli import main
from sde_core.errors import ActivationError, SDEError
from sde_core.inputs.isolation import process_tree
from sde_core.pipeline.model_inputs import entry_layer_infos, load_entry_model
from sde_core.pipeline.workspace import ModelEntry
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.pipeline.workspace_write import write_workspace
from sde_core.services.uploads import Upload, add_uploaded_model
from sde_core.services.workspace_models import ModelSpec, add_model

LIMIT = "2"
FAST = ["--subset-size", "8", "--targets", "4", "--splits", "4", "--panel-size", "20", *FIXED_FLAGS]


class _ForwardLoop(nn.Module):
    """``forward`` never returns (inputs of 4 features, like the test workspace's data)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = 0
        while n >= 0:
            n = n + 1
        return x[:, :3] * float(n)


class _SetstateLoop(nn.Module):
    """Loading runs ``__setstate__``, which never returns."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.zeros(4, 3)

    @torch.jit.export
    def __getstate__(self) -> tuple[torch.Tensor, bool]:
        return (self.weight, self.training)

    @torch.jit.export
    def __setstate__(self, state: tuple[torch.Tensor, bool]) -> None:
        n = 0
        while n >= 0:
            n = n + 1
        self.weight = state[0] * float(n)
        self.training = state[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


class _Exec:
    """Unpickling runs ``exec(code)``: what a hostile full pickle does."""

    def __init__(self, code: str) -> None:
        self.code = code

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (exec, (self.code,))


def _script(module: nn.Module, path: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.script(module).save(str(path))
    return path


def _double_fork(folder: Path) -> str:
    """Code that starts a grandchild in its own session (the intermediate process exits, so it
    is orphaned), which records its pid and would write ``marker`` 30 s later; then loops."""
    pid_file, marker = folder / "grandchild.pid", folder / "marker"
    shell = f'(setsid sh -c "echo \\$\\$ > {pid_file}; sleep 30; touch {marker}" &)'
    return (
        "import subprocess, time\n"
        f"subprocess.run(['sh', '-c', {shell!r}], start_new_session=True)\n"
        "time.sleep(600)\n"
    )


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


def test_cli_add_model_stops_a_looping_torchscript(ws_root, capsys):
    loop = _script(_ForwardLoop(), ws_root / "loop.pt")
    start = time.monotonic()
    args = ["workspace", "add-model", str(ws_root), "--name", "x", "--checkpoint", str(loop)]
    assert main([*args, "--trusted", "--time-limit", LIMIT]) == 1
    err = capsys.readouterr().err
    assert "did not finish a forward pass of 2 samples within 2 s" in err, err
    assert "--time-limit" in err and "Traceback" not in err
    assert time.monotonic() - start < 60
    assert 'name = "x"' not in (ws_root / "workspace.toml").read_text()  # nothing written
    assert main([*args, "--trusted", "--time-limit", "0"]) == 2  # a usage error, not a hang
    assert "positive number of seconds" in capsys.readouterr().err


def test_page_add_tab_stops_a_looping_setstate_and_says_the_limit(ws_root):
    data = _script(_SetstateLoop(), ws_root / "setstate.pt").read_bytes()
    spec = ModelSpec(name="x", role="unlearned", trusted=True, time_limit=2.0)
    start = time.monotonic()
    result = add_uploaded_model(ws_root, Upload("setstate.pt", data), spec)
    assert not result.saved and time.monotonic() - start < 60
    message = " ".join(p.message for p in result.problems)
    assert "did not finish loading within 2 s" in message, message


def test_a_double_forking_pickle_leaves_no_process_behind(ws_root):
    evil = ws_root / "evil.pt"
    torch.save({"state_dict": _Exec(_double_fork(ws_root))}, evil)
    spec = ModelSpec(name="x", role="unlearned", trusted=True, time_limit=2.0)
    with pytest.raises(ActivationError, match="did not finish loading within 2 s"):
        add_model(ws_root, spec, checkpoint=evil)
    pid = int((ws_root / "grandchild.pid").read_text())
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid), "the double-forked grandchild survived the time limit"
    assert not (ws_root / "marker").exists()


def test_an_allocation_bomb_ends_at_the_memory_limit(ws_root):
    bomb = ws_root / "bomb.pt"
    torch.save({"state_dict": _Exec("bytearray(64 << 30)")}, bomb)
    spec = ModelSpec(name="x", role="unlearned", trusted=True)
    with pytest.raises(ActivationError, match="ran out of its memory limit of 16 GiB"):
        add_model(ws_root, spec, checkpoint=bomb)


def test_evaluate_layers_and_unlearn_keep_the_limit(ws_root, capsys, tmp_path):
    loop = _script(_ForwardLoop(), ws_root / "models" / "loop.pt")
    ws = load_workspace(ws_root)
    entry = ModelEntry(name="looping", role="unlearned", checkpoint="models/loop.pt", trusted=True)
    ws.add_model(entry)
    write_workspace(ws)
    assert loop.is_file()
    assert main(["workspace", "trust", str(ws_root), "--model", "looping"]) == 0  # local opt-in
    start = time.monotonic()
    out = tmp_path / "o.json"
    assert main(["evaluate", str(ws_root), "--no-store", "--time-limit", LIMIT, *FAST,
                 "--models", "looping", "--json", str(out)]) == 1  # fmt: skip
    err = capsys.readouterr().err
    assert "within 2 s" in err and "Traceback" not in err, err
    assert not out.exists()
    with pytest.raises(ActivationError, match="did not finish a dry forward pass within 2 s"):
        entry_layer_infos(ws, entry, (4,), time_limit=2.0)
    with pytest.raises(SDEError, match=r"not be rebuilt from its weights|TorchScript"):
        load_entry_model(ws, entry, time_limit=2.0)  # unlearn: never loaded in this process
    assert time.monotonic() - start < 90
    assert process_tree(os.getpid())[0] == os.getpid()


@pytest.mark.parametrize(
    "command",
    [["workspace", "add-model"], ["evaluate"], ["report"], ["verify"], ["unlearn"]],
)
def test_every_command_that_loads_a_model_has_a_time_limit(command, capsys):
    with contextlib.suppress(SystemExit):  # argparse's --help exits
        main([*command, "--help"])
    assert "--time-limit SECONDS" in capsys.readouterr().out


class _WrongWidth(nn.Module):
    """A well-behaved model with 5 outputs, for a dataset of 3 classes."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x[:, :1]], dim=1)


def test_a_trusted_model_is_checked_against_the_data_in_the_child(ws_root):
    wrong = _script(_WrongWidth(), ws_root / "wrong.pt")
    spec = ModelSpec(name="x", role="unlearned", trusted=True, time_limit=30.0)
    with pytest.raises(SDEError, match="has 5 outputs but the dataset has 3 classes"):
        add_model(ws_root, spec, checkpoint=wrong)
