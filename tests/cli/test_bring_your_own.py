"""Bring your own model (issue 15), end to end from the documented commands alone.

Every artefact is written the way the field's own code saves it: ``torch.save`` of a state dict
(plain, ``module.``-prefixed, or SalUn's ``{"state_dict": ..., "epoch": ...}`` ``.pth.tar``), a
torchvision model with a non-default ``num_classes``, and precomputed activations exported to
npz/parquet in three natural layouts. Each scenario only calls ``python -m sde_core`` commands
(in-process through :func:`sde_core.cli.main`) and checks that models that differ get different
numbers, and that one model saved two ways gets identical ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from helpers.designs import FIXED_FLAGS

from sde_core.cli import main
from sde_core.inputs.architectures import build_model
from sde_core.inputs.models import save_checkpoint
from sde_core.pipeline.workspace_load import load_workspace

NUMBERS = ("otr", "calibrated_otr", "f1", "dependence_score", "reference_p", "acc_r", "acc_te")


def run(*argv: str) -> None:
    assert main(list(argv)) == 0, argv


def evaluate(ws: Path, out: Path, *flags: str) -> dict:
    run(
        "evaluate",
        str(ws),
        "--json",
        str(out),
        "--no-store",
        "--baseline-targets",
        "0",
        *FIXED_FLAGS,
        *flags,
    )
    return json.loads(out.read_text())["models"]


def differ(a: dict, b: dict) -> bool:
    return any(a[k] != b[k] for k in NUMBERS if a[k] is not None or b[k] is not None)


# ------------------------------------------------------------------------- checkpoints


def _fit(x: torch.Tensor, y: torch.Tensor, steps: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = build_model("mlp", input_dim=16, hidden=[64], num_classes=4)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return model.eval()


@pytest.fixture(scope="module")
def checkpoint_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Noisy 4-class data; an MLP fit on D_tr (saved as SalUn's .pth.tar), one fit on D_r only
    (a DataParallel-style state dict), a fresh initialisation (plain .pt); a text forget set
    with a byte-order mark."""
    ws = tmp_path_factory.mktemp("byo") / "audit"
    (ws / "checkpoints").mkdir(parents=True)
    rng = np.random.default_rng(0)
    templates = rng.normal(size=(4, 16))
    y = rng.integers(0, 4, 700)
    x = (templates[y] + 2.5 * rng.normal(size=(700, 16))).astype(np.float32)
    np.savez(ws / "data.npz", x_train=x[:400], y_train=y[:400], x_test=x[400:], y_test=y[400:])
    forget = np.sort(rng.choice(400, 100, replace=False))
    (ws / "forget.txt").write_bytes(b"\xef\xbb\xbf" + ", ".join(map(str, forget)).encode())
    xt, yt = torch.from_numpy(x[:400]), torch.from_numpy(y[:400])
    retain = np.setdiff1d(np.arange(400), forget)
    original = _fit(xt, yt, 300, seed=0)
    torch.save(
        {"state_dict": original.state_dict(), "epoch": 300, "best_acc": 99.5},
        ws / "checkpoints" / "original.pth.tar",
    )
    retrained = _fit(xt[retain], yt[retain], 300, seed=1)
    torch.save(
        {f"module.{k}": v for k, v in retrained.state_dict().items()},
        ws / "checkpoints" / "retrain.pth",
    )
    torch.manual_seed(2)
    random = build_model("mlp", input_dim=16, hidden=[64], num_classes=4)
    torch.save(random.state_dict(), ws.parent / "random.pt")  # outside the workspace
    return ws


def test_checkpoints_as_saved_by_the_field(checkpoint_ws: Path, tmp_path: Path, capsys):
    ws = checkpoint_ws
    run("workspace", "init", str(ws), "--dataset-kind", "npz", "--dataset-root", "data.npz",
        "--forget", "forget.txt", "--name", "audit")  # fmt: skip
    out = capsys.readouterr().out
    assert "|D_f| = 100" in out and "subset size 70:" in out  # |D_te|/4 = 75: null check on
    run("workspace", "add-model", str(ws), "--name", "original",
        "--checkpoint", str(ws / "checkpoints" / "original.pth.tar"))  # fmt: skip
    run("workspace", "add-model", str(ws), "--name", "retrained",
        "--checkpoint", str(ws / "checkpoints" / "retrain.pth"), "--method", "retrain")  # fmt: skip
    assert main(["workspace", "add-model", str(ws), "--name", "random",
                 "--checkpoint", str(ws.parent / "random.pt")]) == 1  # fmt: skip
    assert "--copy" in capsys.readouterr().err
    run("workspace", "add-model", str(ws), "--name", "random", "--role", "random",
        "--checkpoint", str(ws.parent / "random.pt"), "--copy")  # fmt: skip
    loaded = load_workspace(ws)
    roles = {m.name: (m.role, m.arch, m.checkpoint) for m in loaded.models}
    assert roles["original"] == ("original", "mlp", "checkpoints/original.pth.tar")
    assert roles["retrained"][:2] == ("retrained", "mlp")
    assert roles["random"] == ("random", "mlp", "models/random/random.pt")
    assert all(m.sha256 and m.arch_kwargs["num_classes"] == 4 for m in loaded.models)
    run("workspace", "validate", str(ws), "--check-data")
    rows = evaluate(ws, tmp_path / "o.json", "--subset-size", "60", "--targets", "10",
                    "--splits", "20")  # fmt: skip
    assert list(rows) == ["original", "retrained", "random"]
    assert differ(rows["original"], rows["retrained"])
    assert differ(rows["original"], rows["random"])
    assert rows["original"]["acc_r"] > rows["random"]["acc_r"]


def test_add_model_refusals_change_nothing(checkpoint_ws: Path, capsys):
    ws = checkpoint_ws
    if not (ws / "workspace.toml").exists():
        run("workspace", "init", str(ws), "--dataset-kind", "npz", "--dataset-root", "data.npz",
            "--forget", "forget.txt")  # fmt: skip
    before = {p: p.read_bytes() for p in ws.rglob("*") if p.is_file()}
    bad = [
        (["--name", "a/b", "--checkpoint", "checkpoints/retrain.pth"], "is not allowed"),
        (
            [
                "--name",
                "x",
                "--checkpoint",
                str(ws / "checkpoints" / "retrain.pth"),
                "--arch",
                "mlp",
                "--arch-kwarg",
                "num_classes=7",
            ],
            "does not fit",
        ),
        (["--name", "x", "--checkpoint", str(ws / "data.npz")], "checkpoint"),
        (["--name", "x"], "checkpoint, its activations file, or both"),
        (["--name", "x", "--checkpoint", str(ws / "nope.pt")], "does not exist"),
    ]
    for flags, text in bad:
        assert main(["workspace", "add-model", str(ws), *flags]) == 1, flags
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and text in err[0], (flags, err)
    after = {p: p.read_bytes() for p in ws.rglob("*") if p.is_file()}
    assert after == before


# ------------------------------------------------------------------------- torchvision


TV = "torchvision:mobilenet_v3_small"


@pytest.fixture(scope="module")
def torchvision_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """32×32 RGB images of 4 classes (a class colour plus noise); a torchvision model with
    num_classes=4 saved as a plain state dict (no architecture metadata) and the same weights
    re-saved as safetensors."""
    ws = tmp_path_factory.mktemp("tv") / "ws"
    ws.mkdir()
    rng = np.random.default_rng(1)
    labels = np.arange(100) % 4
    colours = rng.integers(0, 256, (4, 1, 1, 3))
    noise = rng.normal(0, 40, (100, 32, 32, 3))
    images = np.clip(colours[labels] + noise, 0, 255).astype(np.uint8)
    np.savez(ws / "images.npz", x_train=images[:60], y_train=labels[:60],
             x_test=images[60:], y_test=labels[60:])  # fmt: skip
    torch.manual_seed(0)
    model = build_model(TV, num_classes=4).eval()
    torch.save(model.state_dict(), ws / "tv.pth")
    save_checkpoint(model, ws / "tv.safetensors", TV)
    return ws


def test_arch_kwargs_are_honoured_everywhere(torchvision_ws: Path, tmp_path: Path, capsys):
    ws = torchvision_ws
    run("workspace", "init", str(ws), "--dataset-kind", "npz", "--dataset-root", "images.npz",
        "--forget-class", "3")  # fmt: skip
    assert main(["workspace", "add-model", str(ws), "--name", "plain", "--checkpoint",
                 str(ws / "tv.pth"), "--arch", TV]) == 1  # fmt: skip
    assert "(1000,)" in capsys.readouterr().err  # without its kwargs the head does not fit
    kwarg = ("--arch", TV, "--arch-kwarg", "num_classes=4")
    assert main(["workspace", "add-model", str(ws), "--name", "plain", "--role", "original",
                 "--checkpoint", str(ws / "tv.pth"), *kwarg]) == 1  # fmt: skip
    err = capsys.readouterr().err  # an untrained original: at chance on D_r (issue 40)
    assert (
        f"{ws / 'tv.pth'} classifies only" in err and "not significantly better than chance" in err
    )
    assert f"workspace init {ws} " in err and "--no-accuracy-check" in err
    run("workspace", "add-model", str(ws), "--name", "plain", "--role", "original",
        "--checkpoint", str(ws / "tv.pth"), *kwarg, "--no-accuracy-check")  # fmt: skip
    run("workspace", "add-model", str(ws), "--name", "resaved", "--role", "unlearned",
        "--checkpoint", str(ws / "tv.safetensors"))  # fmt: skip
    assert load_workspace(ws).model("plain").arch_kwargs == {"num_classes": 4}
    flags = ("--subset-size", "8", "--targets", "4", "--splits", "6")
    rows = evaluate(ws, tmp_path / "a.json", *flags)
    plain, resaved = rows["plain"], rows["resaved"]
    named = ("role", "verdict_sentence")  # the sentence names the model
    assert {k: v for k, v in plain.items() if k not in named} == {
        k: v for k, v in resaved.items() if k not in named
    }
    run("unlearn", str(ws), "--method", "ft", "--name", "ft", "--original", "plain",
        "--param", "epochs=1", "--param", "batch_size=16")  # fmt: skip
    ft = load_workspace(ws).model("ft")
    assert (ft.arch, ft.arch_kwargs) == (TV, {"num_classes": 4})
    assert ft.sha256 != load_workspace(ws).model("plain").sha256  # FT changed the weights


# ------------------------------------------------------------------------- activations

N_TR, N_TE, N_F, D = 1200, 800, 300, 6


def _acts(remembers: bool | None, forget: np.ndarray, seed: int) -> np.ndarray:
    """One model's (N_TR + N_TE, D) activations: training rows spread wider than unseen rows
    (the planted in-training signal), D_f like training rows iff remembered; None = no signal."""
    rng = np.random.default_rng(seed)
    acts = rng.normal(size=(N_TR + N_TE, D))
    if remembers is not None:
        acts[:N_TR] *= 1.8
        if not remembers:
            acts[forget] = rng.normal(size=(forget.size, D))
    return acts.astype(np.float32)


@pytest.fixture(scope="module")
def activations_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("acts") / "lm"
    (ws / "exports").mkdir(parents=True)
    forget = np.sort(np.random.default_rng(0).choice(N_TR, N_F, replace=False))
    np.save(ws / "forget.npy", forget)
    split = np.array(["train"] * N_TR + ["test"] * N_TE)
    labels = np.arange(N_TR + N_TE) % 3
    original = _acts(True, forget, seed=1)
    np.savez(ws / "exports" / "original.npz", hidden_states=original, split=split, label=labels)
    retrained = _acts(False, forget, seed=2)
    frame = pd.DataFrame({"split": split, "label": labels})
    frame["hidden_states"] = list(retrained)
    frame.to_parquet(ws / "exports" / "retrained.parquet")
    random = _acts(None, forget, seed=3)
    np.savez(ws / "exports" / "random.npz", train_hidden_states=random[:N_TR],
             test_hidden_states=random[N_TR:])  # fmt: skip
    return ws


def test_three_activation_files_give_three_rows(activations_ws: Path, tmp_path: Path, capsys):
    ws = activations_ws
    run("workspace", "init", str(ws), "--dataset-kind", "activations", "--dataset-root",
        "exports/original.npz", "--forget", "forget.npy")  # fmt: skip
    assert "default layer 'hidden_states'" in capsys.readouterr().out
    for name, role, file in (("original", "original", "original.npz"),
                             ("retrained", "retrained", "retrained.parquet"),
                             ("random", "random", "random.npz")):  # fmt: skip
        run("workspace", "add-model", str(ws), "--name", name, "--role", role,
            "--activations", f"{ws}/exports/{file}")  # fmt: skip
    models = load_workspace(ws).models
    assert {m.arch for m in models} == {"precomputed"} and not any(m.checkpoint for m in models)
    rows = evaluate(ws, tmp_path / "acts.json", "--subset-size", "60", "--targets", "20",
                    "--splits", "40", "--panel-size", "20")  # fmt: skip
    original, retrained, random = rows["original"], rows["retrained"], rows["random"]
    assert differ(original, retrained) and differ(original, random) and differ(retrained, random)
    assert original["references_valid"] and retrained["references_valid"]
    assert original["otr"] <= 0.2 and retrained["otr"] >= 0.8
    assert original["layer"] == "hidden_states"
    assert original["acc_r"] is None  # no output layer: no classic metrics, said as null
