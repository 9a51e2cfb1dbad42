"""Tests of the CLI: an end-to-end workspace session and one-line errors with exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sde_core.cli import COMMAND_GROUPS, add_command_group, main
from sde_core.inputs.data import load_dataset
from sde_core.inputs.models import load_checkpoint
from sde_core.pipeline.workspace_checks import validate_workspace
from sde_core.pipeline.workspace_load import load_workspace

MLP = ["--arch", "mlp", "--arch-kwarg", "input_dim=4", "--arch-kwarg", "hidden=[8]",
       "--arch-kwarg", "num_classes=3"]  # fmt: skip


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    ws = tmp_path / "ws"
    ws.mkdir()
    np.savez(
        ws / "data.npz",
        x_train=rng.normal(size=(60, 4)).astype(np.float32),
        y_train=rng.integers(0, 3, 60),
        x_test=rng.normal(size=(20, 4)).astype(np.float32),
        y_test=rng.integers(0, 3, 20),
    )
    code = main(
        [
            "workspace",
            "init",
            str(ws),
            "--dataset-kind",
            "npz",
            "--dataset-root",
            "data.npz",
            "--random-forget",
            "0.2",
            "--name",
            "tiny",
        ]
    )
    assert code == 0
    return ws


def one_error_line(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("error: ") and "Traceback" not in err[0]
    return err[0]


def test_end_to_end_session(folder, capsys):
    forget = np.load(folder / "forget.npy")
    assert forget.size == 12 and np.unique(forget).size == 12
    train = ["train", str(folder), "--name", "original", *MLP, "--epochs", "5", "--lr", "0.05",
             "--batch-size", "16"]  # fmt: skip
    assert main(train) == 0
    assert main(["train", str(folder), "--name", "rand", "--role", "random", *MLP]) == 0
    for method, params in [("ft", ["epochs=1"]), ("retrain", ["epochs=2"]), ("unroll", []),
                           ("salun", ["epochs=1", "batch_size=8"])]:  # fmt: skip
        argv = ["unlearn", str(folder), "--method", method, "--name", f"h_{method}"]
        assert main(argv + [a for p in params for a in ("--param", p)]) == 0
    capsys.readouterr()

    ws = load_workspace(folder)
    assert validate_workspace(ws, check_data=True) == []
    roles = {m.name: m.role for m in ws.models}
    assert roles == {
        "original": "original",
        "rand": "random",
        "h_ft": "unlearned",
        "h_retrain": "retrained",
        "h_unroll": "unlearned",
        "h_salun": "unlearned",
    }
    original = ws.original()
    assert original.hyperparameters["epochs"] == 5 and original.init_checkpoint is not None
    assert [c.fraction for c in original.checkpoints] == [0.1, 0.2, 0.4, 0.8]
    unroll = ws.model("h_unroll").hyperparameters
    assert unroll == {"lr": 0.05, "epochs_seen": 5, "batch_size": 256}
    assert ws.model("h_retrain").hyperparameters["batch_size"] == 16  # the original's recipe
    assert ws.model("h_ft").hyperparameters["epochs"] == 1
    assert ws.model("h_salun").seconds > 0
    model = load_checkpoint(ws.path(ws.model("h_ft").checkpoint))
    assert model.head.out_features == 3

    assert main(["workspace", "show", str(folder), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in shown["models"]][:2] == ["original", "rand"]
    assert main(["workspace", "show", str(folder)]) == 0
    assert "h_retrain" in capsys.readouterr().out
    assert main(["workspace", "validate", str(folder), "--check-data"]) == 0
    assert "is valid (6 models)" in capsys.readouterr().out


def test_unknown_method_param_is_one_line(folder, capsys):
    assert (
        main(["unlearn", str(folder), "--method", "ga", "--name", "x", "--param", "bogus=1"]) == 1
    )
    line = one_error_line(capsys)
    assert "unknown parameter(s) ['bogus']" in line and "clip_grad_norm" in line


@pytest.mark.parametrize(
    ("argv", "code", "text"),
    [
        (["workspace", "show", "/nonexistent/ws"], 1, "does not exist"),
        (["unlearn", "{ws}", "--method", "ft", "--name", "x"], 1, "no model with role 'original'"),
        (["unlearn", "{ws}", "--method", "magic", "--name", "x"], 1, "unknown unlearning method"),
        (["unlearn", "{ws}", "--method", "ft", "--name", "x", "--param", "lr"], 1, "key=value"),
        (["train", "{ws}", "--name", "o", "--arch", "vgg99"], 1, "unknown architecture"),
        (["train", "{ws}", "--name", "o", *MLP, "--epochs", "0"], 1, "epochs must be an integer"),
        (["train", "{ws}", "--name", "o", *MLP, "--arch-kwarg", "colour=1"], 1, "cannot build"),
        (["train", "{ws}", "--name", "o", "--arch", "mlp", "--optimizer", "rmsprop"], 2, "invalid"),
        (
            ["train", "{ws}", "--name", "o", "--arch", "mlp"],
            1,
            "cannot process inputs of shape (4,)",
        ),
        (["workspace", "frobnicate"], 2, "invalid choice"),
        (
            ["workspace", "init", "{ws}", "--dataset-kind", "npz", "--forget", "f.npy"],
            1,
            "already exists",
        ),
        (["evaluate"], 2, "required: workspace"),
        (["demo-build"], 2, "invalid choice"),
    ],
)
def test_bad_input_gives_one_line_and_exit_code(folder, capsys, argv, code, text):
    capsys.readouterr()
    assert main([a.replace("{ws}", str(folder)) for a in argv]) == code
    assert text in one_error_line(capsys)


def test_validate_reports_problems_with_exit_1(folder, capsys):
    assert main(["train", str(folder), "--name", "rand", "--role", "random", *MLP]) == 0
    (folder / "models" / "rand" / "init.safetensors").write_bytes(b"changed")
    capsys.readouterr()
    assert main(["workspace", "validate", str(folder)]) == 0  # a changed hash is a warning
    assert "warning: models[0].sha256" in capsys.readouterr().out
    (folder / "models" / "rand" / "init.safetensors").unlink()
    assert main(["workspace", "validate", str(folder)]) == 1
    assert "error: models[0].checkpoint" in capsys.readouterr().err


def test_command_groups_are_extensible(capsys):
    def register(sub):
        p = sub.add_parser("hello")
        p.add_argument("--who", default="world")
        p.set_defaults(func=lambda args: print(f"hello {args.who}") or 0)

    add_command_group(register)
    try:
        assert main(["hello", "--who", "sde"]) == 0
        assert capsys.readouterr().out.strip() == "hello sde"
    finally:
        COMMAND_GROUPS.remove(register)


def test_python_dash_m_entry_point(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "sde_core", "workspace", "show", str(tmp_path / "none")],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0 and proc.stderr.startswith("error: ")


def _npz_with_classes(path: Path) -> None:
    rng = np.random.default_rng(1)
    np.savez(
        path,
        x_train=rng.normal(size=(60, 4)).astype(np.float32),
        y_train=np.arange(60) % 3,
        x_test=rng.normal(size=(30, 4)).astype(np.float32),
        y_test=np.arange(30) % 3,
        classes=np.array(["cat", "dog", "owl"]),
    )


def test_init_forget_classes_and_a_subset_size_that_fits(tmp_path, capsys):
    ws = tmp_path / "ws"
    ws.mkdir()
    _npz_with_classes(ws / "data.npz")
    argv = ["workspace", "init", str(ws), "--dataset-kind", "npz", "--dataset-root", "data.npz"]
    assert main([*argv, "--forget-class", "owl,0"]) == 0
    out = capsys.readouterr().out  # |D_te| = 30: its control half holds two subsets of 7
    assert "subset size 7:" in out and "the null check is on" in out
    forget = np.load(ws / "forget.npy")
    assert np.array_equal(forget, np.flatnonzero(np.arange(60) % 3 != 1))
    loaded = load_workspace(ws, validate=False)
    assert loaded.defaults.subset_size == 7 and loaded.dataset["root"] == "data.npz"


def test_failed_init_writes_nothing(tmp_path, capsys):
    ws = tmp_path / "ws"
    ws.mkdir()
    _npz_with_classes(ws / "data.npz")
    argv = ["workspace", "init", str(ws), "--dataset-kind", "npz", "--dataset-root", "data.npz"]
    for extra, text in (
        (["--forget-class", "eagle"], "neither a class id nor a class name"),
        (["--random-forget", "1.5"], "must be in (0, 1)"),
        (["--forget", "missing.npy"], "does not exist"),
        (["--random-forget", "0.5", "--forget-class", "cat"], "exactly one forget set"),
        (["--random-forget", "0.2", "--subset-size", "2"], "subset_size must be"),
        (["--random-forget", "0.2", "--dataset-option", "colour=1"], "unknown dataset option"),
    ):
        assert main([*argv, *extra]) == 1, extra
        assert text in one_error_line(capsys), extra
        assert sorted(p.name for p in ws.iterdir()) == ["data.npz"], extra
    outside = ["workspace", "init", str(tmp_path / "new"), "--dataset-kind", "npz",
               "--dataset-root", str(ws / "data.npz"), "--random-forget", "0.2"]  # fmt: skip
    assert main(outside) == 1
    assert "outside the allowed folders" in one_error_line(capsys)
    assert not (tmp_path / "new").exists()
    assert main([*argv, "--random-forget", "0.2"]) == 0
    before = (ws / "workspace.toml").read_bytes()
    assert main([*argv, "--forget-class", "eagle", "--overwrite"]) == 1
    assert (ws / "workspace.toml").read_bytes() == before


def test_replace_never_overwrites_referenced_files(folder, capsys):
    train = ["train", str(folder), "--name", "o", *MLP, "--epochs", "1", "--batch-size", "16"]
    assert main(train) == 0
    first = load_workspace(folder).model("o")
    digest = (folder / first.checkpoint).read_bytes()
    assert main([*train, "--seed", "3", "--replace"]) == 0
    second = load_workspace(folder).model("o")
    assert second.checkpoint.startswith("models/o-2/") and first.checkpoint.startswith("models/o/")
    assert (folder / first.checkpoint).read_bytes() == digest
    assert [m.name for m in load_workspace(folder).models] == ["o"]


def test_empty_workspace_says_how_to_add_a_model(folder, capsys, tmp_path):
    capsys.readouterr()
    assert main(["evaluate", str(folder), "--json", str(tmp_path / "x.json")]) == 1
    assert "has no models" in (line := one_error_line(capsys)) and "add-model" in line
    assert main(["workspace", "validate", str(folder)]) == 1
    assert "the workspace has no models" in capsys.readouterr().err


def test_add_model_help_documents_every_flag(capsys):
    assert main(["workspace", "add-model", "--help"]) == 0
    text = capsys.readouterr().out
    for flag in ("--checkpoint", "--activations", "--role", "--arch", "--arch-kwarg",
                 "--trusted", "--copy", "--replace", "SDE_DATA_ROOTS"):  # fmt: skip
        assert flag in text


def test_init_with_explicit_training_rows(tmp_path, capsys):
    """SalUn-style indices: D_tr is a given list of rows, the forget set indexes D_tr."""
    ws = tmp_path / "ws"
    ws.mkdir()
    _npz_with_classes(ws / "data.npz")
    rows = np.arange(59, 9, -1)  # 50 rows, in a chosen order
    np.save(ws / "kept.npy", rows)
    np.save(ws / "forget.npy", np.arange(5))  # positions 0..4 of D_tr = original rows 59..55
    argv = ["workspace", "init", str(ws), "--dataset-kind", "npz", "--dataset-root", "data.npz",
            "--train-indices", "kept.npy", "--forget", "forget.npy"]  # fmt: skip
    assert main(argv) == 0
    assert "|D_tr| = 50, |D_f| = 5" in capsys.readouterr().out
    loaded = load_workspace(ws, validate=False)
    assert loaded.dataset["train_indices"] == "kept.npy"
    bundle = load_dataset(loaded.dataset_spec())
    assert np.array_equal(bundle.source_indices["train"], rows)
