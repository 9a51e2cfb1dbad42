"""A toy family end to end: the 1-D signal regressor (sde_core/families/signal_regressor.py) is
detected, its layers are its family's, its activations run through the evaluation, and a
workspace of its models is built and evaluated by the command line and opens on Explore and
Compare, with nothing of the library but that one module knowing the family."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.designs import FIXED, fixed_settings
from torch import nn
from torch.utils.data import TensorDataset
from ui_fixtures import app_test, warm_server

from sde_core.cli import main
from sde_core.errors import ActivationError
from sde_core.families.registry import family_of, family_of_entry
from sde_core.families.signal_regressor import SIGNAL_REGRESSOR
from sde_core.inputs.architectures import build_model
from sde_core.inputs.extraction import extract_activations
from sde_core.inputs.layers import list_layers, resolve_layer
from sde_core.learning.training import save_weights
from sde_core.pipeline.evaluation.plan import draw_subsets
from sde_core.pipeline.evaluation.run_driver import evaluate_arrays
from sde_core.pipeline.model_inputs import ModelInputs
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.pipeline.workspace_write import write_workspace

pytestmark = pytest.mark.usefixtures("one_torch_thread")

N_TR, N_TE, N_F, D = 1200, 800, 300, 16
APP = Path(__file__).resolve().parents[2] / "app.py"
#: small T/K/n, so that the evaluations take seconds
SETTINGS = {**FIXED, "subset_size": 60, "targets": 20, "splits": 40, "panel_size": 20,
            "null_pairs": 6, "baseline_targets": 6}  # fmt: skip


def _data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, np.ndarray]:
    """Noisy targets of a smooth function of the signal (noise a model can only memorise)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N_TR + N_TE, D)).astype(np.float32)
    y = np.sin(x @ rng.normal(size=D) / 2) + rng.normal(scale=0.5, size=len(x))
    forget = rng.choice(N_TR, N_F, replace=False)
    return torch.from_numpy(x[:N_TR]), torch.from_numpy(x[N_TR:]), torch.tensor(y), forget


def _fit(x: torch.Tensor, y: torch.Tensor, seed: int) -> nn.Module:
    """The family's architecture trained by full-batch Adam on the mean squared error (the
    family's objective), long enough to fit part of the noise of its training rows."""
    torch.manual_seed(seed)
    model = build_model("signal_mlp", input_dim=D)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(300):
        opt.zero_grad()
        nn.functional.mse_loss(model(x).squeeze(1), y.float()).backward()
        opt.step()
    return model.eval()


@pytest.fixture(scope="module")
def models() -> dict[str, object]:
    x_tr, x_te, y, forget = _data()
    retain = np.setdiff1d(np.arange(N_TR), forget)
    return {
        "x_tr": x_tr, "x_te": x_te, "y": y, "forget": forget,
        "original": _fit(x_tr, y[:N_TR], seed=1),
        "retrained": _fit(x_tr[retain], y[:N_TR][retain], seed=1),
    }  # fmt: skip


def test_a_signal_regressor_is_its_family_and_runs_through_the_evaluation(models):
    original, retrained = models["original"], models["retrained"]
    assert family_of(original) is SIGNAL_REGRESSOR
    assert family_of_entry("signal_mlp", "prediction") is SIGNAL_REGRESSOR  # without loading
    # its layers are its family's: no softmax output, no noise levels
    names = [info.name for info in list_layers(original, (D,))]
    assert names[:2] == ["prediction", "hidden"]
    with pytest.raises(ActivationError, match="unknown layer 'output'"):
        resolve_layer(original, "output")
    with pytest.raises(ActivationError, match="only a denoiser is probed at noise levels"):
        resolve_layer(original, "hidden@0.5")

    settings = fixed_settings(**SETTINGS)
    plan = draw_subsets(N_TR, N_TE, models["forget"], settings)
    layer = SIGNAL_REGRESSOR.default_layer  # "prediction", the model's output
    otr = {}
    for name, role, model in (("orig", "original", original), ("re", "retrained", retrained)):
        tr = extract_activations(model, TensorDataset(models["x_tr"]), layer)[layer]
        te = extract_activations(model, TensorDataset(models["x_te"]), layer)[layer]
        assert tr.shape == (N_TR, 1) and te.shape == (N_TE, 1)
        summary = evaluate_arrays(ModelInputs(name, role, tr, te), plan, settings).summary
        assert summary["references_valid"] and summary["panel_valid"], summary
        assert summary["otr_lo"] <= summary["otr"] <= summary["otr_hi"]
        otr[role] = summary["otr"]
    # D_f is training data of the original only: fewer of its targets read as out of training
    assert otr["original"] < otr["retrained"], otr


@pytest.fixture(scope="module")
def workspace(models, tmp_path_factory) -> Iterator[Path]:
    """A workspace of the two regressors built and evaluated by the command line, opened by
    the app (SDE_WORKSPACE, inside SDE_DATA_ROOTS); both variables are restored afterwards."""
    root = tmp_path_factory.mktemp("regressor")
    labels = (models["y"].numpy() > 0).astype(np.int64)  # the dataset's classes: the sign
    np.savez(root / "signals.npz", x_train=models["x_tr"].numpy(), y_train=labels[:N_TR],
             x_test=models["x_te"].numpy(), y_test=labels[N_TR:])  # fmt: skip
    np.save(root / "forget.npy", np.sort(models["forget"]))
    for role in ("original", "retrained"):
        save_weights(models[role], root / f"{role}.safetensors", arch="signal_mlp")
    saved = {k: os.environ.get(k) for k in ("SDE_WORKSPACE", "SDE_DATA_ROOTS")}
    os.environ["SDE_DATA_ROOTS"] = str(root)
    os.environ["SDE_WORKSPACE"] = str(root / "ws")
    ws = str(root / "ws")
    assert (
        main(
            [
                "workspace",
                "init",
                ws,
                "--dataset-kind",
                "npz",
                "--dataset-root",
                str(root / "signals.npz"),
                "--forget",
                str(root / "forget.npy"),
            ]
        )
        == 0
    )
    for role in ("original", "retrained"):
        assert main(["workspace", "add-model", ws, "--name", role, "--role", role,
                     "--checkpoint", str(root / f"{role}.safetensors")]) == 0  # fmt: skip
    loaded = load_workspace(ws)
    assert loaded.defaults.layer == "prediction"  # the family's default layer, not `output`
    loaded.defaults = loaded.defaults.with_overrides(**SETTINGS)
    write_workspace(loaded)
    assert main(["evaluate", ws, "--json", str(root / "result.json"), "--quiet"]) == 0
    yield root / "ws"
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def test_a_workspace_of_regressors_is_evaluated_by_the_command_line(workspace):
    doc = json.loads((workspace.parent / "result.json").read_text())
    assert doc["settings"]["layer"] == "prediction"
    rows = doc["models"]
    assert set(rows) == {"original", "retrained"}
    for row in rows.values():
        assert row["references_valid"] is True
        assert row["acc_f"] is None and row["asr"] is None  # no classes: no accuracy, no attack
    assert rows["original"]["otr"] < rows["retrained"]["otr"]


@pytest.mark.parametrize("page", ["explore", "compare"])
def test_a_workspace_of_regressors_opens_on_explore_and_compare(workspace, page):
    with warm_server():
        at = app_test(APP, 120)
        at.switch_page(f"pages/{page}.py")
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    shown = " ".join(m.value for m in at.markdown)
    if page == "explore":  # its inputs as curves, captioned with its prediction
        assert "references valid" in shown  # the stored evaluation, at the family's layer
        assert "inputs, original's predictions**" in shown and "right)" not in shown
        assert any("predicts" in str(c.proto) for c in at.get("plotly_chart"))
    else:
        table = next(t.value for t in at.dataframe if "OTR [prediction]" in t.value.columns)
        assert set(table["name"]) == {"original", "retrained"}
