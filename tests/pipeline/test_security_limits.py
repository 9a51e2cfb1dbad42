"""The last holes of the hostile-input run (issue 20), one test per case: caches and stores
written outside the roots, inputs sized up before they are read, and a clean error (or a right
acceptance) for every traceback or wrong answer the run found."""

from __future__ import annotations

import csv
import io
import json
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from helpers.designs import FIXED_FLAGS, fixed_settings
from helpers.workspaces import N_TRAIN

from sde_core.cli import main
from sde_core.errors import CheckpointError, DataError, InputError, WorkspaceError
from sde_core.inputs.architectures import build_model
from sde_core.inputs.indices import load_index_file
from sde_core.inputs.models import load_checkpoint
from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
from sde_core.pipeline.store import ResultsStore, workspace_store_path
from sde_core.pipeline.workspace import (
    MAX_DESCRIPTION_CHARS,
    MAX_MODELS,
    MAX_TABLE_KEYS,
    MAX_TOML_BYTES,
    cache_path,
)
from sde_core.pipeline.workspace_checks import validate_workspace
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.pipeline.workspace_write import write_workspace
from sde_core.services.view_state import decode
from sde_core.stats.proportions import wilson_interval
from sde_core.viz.report.exports import to_csv_bytes

FAST = ["--subset-size", "8", "--targets", "4", "--splits", "4", "--panel-size", "20", *FIXED_FLAGS]
TINY = fixed_settings(subset_size=8, targets=4, splits=4, panel_size=20, baseline_targets=0)


@pytest.fixture(autouse=True)
def no_env_roots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SDE_DATA_ROOTS", raising=False)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    return folder


def _error(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


# ------------------------------------------------------------------ store and cache path policy


def test_a_dangling_store_link_outside_is_refused_with_and_without_repair(ws_root, outside, capsys):
    (ws_root / ".sde-cache").mkdir()
    (ws_root / ".sde-cache" / "results.sqlite").symlink_to(outside / "results.sqlite")
    for extra in ([], ["--repair"]):
        assert main(["evaluate", str(ws_root), "--quiet", *FAST, *extra]) == 1
        assert "outside the allowed folders" in _error(capsys)
    assert list(outside.iterdir()) == []  # no store, no -wal/-shm created there


def test_a_cache_folder_linked_outside_is_refused(ws_root, outside, capsys):
    (ws_root / ".sde-cache").symlink_to(outside, target_is_directory=True)
    for kind in ("activations", "stages", "results", "staging"):
        with pytest.raises(WorkspaceError, match="outside the allowed folders"):
            cache_path(ws_root, kind)
    with pytest.raises(WorkspaceError, match="outside"):
        evaluate_workspace(ws_root, TINY)
    assert main(["evaluate", str(ws_root), "--quiet", *FAST]) == 1
    assert "outside" in _error(capsys)
    assert list(outside.iterdir()) == []


def test_a_valid_store_outside_is_neither_read_nor_extended(ws_root, outside):
    outside_store = outside / "results.sqlite"
    with ResultsStore(outside_store) as store:
        store.open_run("h", {"x": 1})
    before = outside_store.read_bytes()
    (ws_root / ".sde-cache").mkdir()
    (ws_root / ".sde-cache" / "results.sqlite").symlink_to(outside_store)
    with pytest.raises(WorkspaceError, match="outside the allowed folders"):
        workspace_store_path(ws_root)
    assert outside_store.read_bytes() == before
    assert sorted(p.name for p in outside.iterdir()) == ["results.sqlite"]


def test_sqlite_side_files_linked_outside_are_refused(ws_root, outside):
    (ws_root / ".sde-cache").mkdir()
    (ws_root / ".sde-cache" / "results.sqlite-wal").symlink_to(outside / "wal")
    with pytest.raises(WorkspaceError, match=r"results cache .*outside"):
        workspace_store_path(ws_root)
    assert cache_path(ws_root, "activations").name == "activations"  # others are unaffected


def test_a_cache_inside_an_allowed_root_is_accepted(ws_root, outside):
    (ws_root / ".sde-cache").symlink_to(outside, target_is_directory=True)
    assert cache_path(ws_root, "results", roots=[outside]) == ws_root / ".sde-cache/results.sqlite"


# ------------------------------------------------------------------ index files, sized first


def _npy(values: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, values)
    return buffer.getvalue()


def test_npy_with_a_corrupted_header_byte_is_a_clean_error(tmp_path):
    raw = bytearray(_npy(np.arange(10)))
    raw[raw.index(b"{") + 3] = ord("(")  # breaks the header's dict literal
    (tmp_path / "f.npy").write_bytes(bytes(raw))
    with pytest.raises(DataError, match="header is damaged"):
        load_index_file(tmp_path / "f.npy", 100)


def test_npy_header_declaring_huge_sizes_is_refused_before_reading(tmp_path):
    raw = _npy(np.arange(1))
    huge = raw.replace(b"(1,)", b"(1000000000000,)")
    header_len = int.from_bytes(raw[8:10], "little")
    fixed = huge[:10] + huge[10 : 10 + header_len + 12].replace(b" " * 12, b"", 1)
    fixed = fixed[: 10 + header_len] + raw[10 + header_len :]  # same header length, 8 data bytes
    assert len(fixed) == len(raw)
    (tmp_path / "f.npy").write_bytes(fixed)
    start = time.monotonic()
    with pytest.raises(DataError, match="declares 1000000000000 entries"):
        load_index_file(tmp_path / "f.npy", 100)
    with pytest.raises(DataError, match="declares 1000000000000 entries"):
        load_index_file(tmp_path / "f.npy", None)  # size unknown: MAX_INDEX_ENTRIES
    np.save(tmp_path / "short.npy", np.arange(50))
    (tmp_path / "short.npy").write_bytes((tmp_path / "short.npy").read_bytes()[:-8])
    with pytest.raises(DataError, match="truncated"):
        load_index_file(tmp_path / "short.npy", 100)
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("suffix", [".txt", ".json", ".pt"])
def test_text_json_and_pt_index_files_are_bounded_by_the_training_set(tmp_path, suffix):
    path = tmp_path / f"f{suffix}"
    values = list(range(20_000))
    if suffix == ".txt":
        path.write_text("\n".join(map(str, values)))
    elif suffix == ".json":
        path.write_text(json.dumps(values))
    else:
        torch.save(torch.arange(200_000), path)
    with pytest.raises(DataError, match="more than a forget set of at most 100 entries"):
        load_index_file(path, 100)


def test_validate_check_data_names_a_huge_npy_header(ws_root, capsys):
    raw = _npy(np.arange(1)).replace(b"(1,),", b"(10**12,)", 1)
    (ws_root / "forget.npy").write_bytes(raw)
    assert main(["workspace", "validate", str(ws_root), "--check-data"]) == 1
    assert "forget_indices" in _error(capsys)


def test_boolean_masks_pass_validate_and_evaluate(ws_root, capsys, tmp_path):
    mask = np.zeros(N_TRAIN, dtype=bool)
    mask[:10] = True
    np.save(ws_root / "forget.npy", mask)
    ws = load_workspace(ws_root)  # validates: the mask is accepted without the data
    assert not [p for p in validate_workspace(ws) if p.severity == "error"]
    assert not [p for p in validate_workspace(ws, check_data=True) if p.severity == "error"]
    assert main(["workspace", "validate", str(ws_root)]) == 0
    out = tmp_path / "o.json"
    args = ["evaluate", str(ws_root), "--quiet", "--no-store", *FAST, "--models", "rand"]
    assert main([*args, "--json", str(out)]) == 0
    assert json.loads(out.read_text())["models"]
    np.save(ws_root / "forget.npy", np.ones(N_TRAIN + 1, dtype=bool))
    problems = validate_workspace(load_workspace(ws_root, validate=False), check_data=True)
    assert any(f"one entry per training row ({N_TRAIN})" in p.message for p in problems)


# ------------------------------------------------------------------ workspace.toml caps


def _toml(ws_root: Path) -> Path:
    return ws_root / "workspace.toml"


def test_a_deep_dotted_key_is_refused_before_parsing(ws_root):
    _toml(ws_root).write_text(_toml(ws_root).read_text() + "a" + ".a" * 20_000 + " = 1\n")
    start = time.monotonic()
    with pytest.raises(WorkspaceError, match=r"nested 200\d\d levels deep"):
        load_workspace(ws_root)
    assert time.monotonic() - start < 2


def test_a_huge_file_is_refused_unread(ws_root):
    text = _toml(ws_root).read_text()
    _toml(ws_root).write_text(text.replace('name = "tiny"', f'name = "{"x" * MAX_TOML_BYTES}"'))
    with pytest.raises(WorkspaceError, match=f"at most {MAX_TOML_BYTES} are read"):
        load_workspace(ws_root)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda ws: setattr(ws, "description", "d" * (MAX_DESCRIPTION_CHARS + 1)), "description"),
        (
            lambda ws: ws.models[0].hyperparameters.update(
                {f"k{i}": i for i in range(MAX_TABLE_KEYS + 1)}
            ),
            "hyperparameters has",
        ),
    ],
)
def test_description_and_hyperparameters_are_capped(ws_root, edit, match):
    ws = load_workspace(ws_root)
    edit(ws)
    with pytest.raises(WorkspaceError, match=match):
        write_workspace(ws)  # never written ...
    text = _toml(ws_root).read_text()
    if match == "description":
        text = text.replace('name = "tiny"', f'name = "tiny"\ndescription = "{ws.description}"')
    else:
        keys = "".join(f"k{i} = {i}\n" for i in range(MAX_TABLE_KEYS + 1))
        text = text.replace("[models.hyperparameters]\n", "[models.hyperparameters]\n" + keys, 1)
    _toml(ws_root).write_text(text)
    with pytest.raises(WorkspaceError, match=match):
        load_workspace(ws_root)  # ... nor read


def test_the_model_count_is_capped(ws_root):
    block = '[[models]]\nname = "m{}"\nrole = "random"\ncheckpoint = "models/random.safetensors"\n'
    extra = "".join(block.format(i) for i in range(MAX_MODELS))
    _toml(ws_root).write_text(_toml(ws_root).read_text() + extra)
    with pytest.raises(WorkspaceError, match=f"{MAX_MODELS + 2} \\[\\[models\\]\\]"):
        load_workspace(ws_root)


# ------------------------------------------------------------------ settings validate checks


@pytest.mark.parametrize(
    ("device", "match"),
    [
        ("meta", "not a compute device"),
        ("", "not a compute device"),
        ("evil", "not a compute device"),
        ("cuda:99", "not available|does not exist"),
    ],
)
def test_validate_checks_the_device_evaluate_will_use(ws_root, capsys, device, match):
    text = _toml(ws_root).read_text().replace('device = "cpu"', f'device = "{device}"')
    _toml(ws_root).write_text(text)
    assert main(["workspace", "validate", str(ws_root)]) == 1
    err = _error(capsys)
    assert "device" in err and any(m in err for m in match.split("|")), err
    assert main(["evaluate", str(ws_root), "--quiet", "--no-store", *FAST]) == 1
    _error(capsys)


def test_cuda_index_beyond_this_machine_is_named(ws_root, capsys):
    if torch.cuda.is_available():
        pytest.skip("the machine has CUDA devices")
    assert main(["evaluate", str(ws_root), "--quiet", "--no-store", *FAST, "--device", "cuda"]) == 1
    assert "CUDA is not available" in _error(capsys)


def test_an_empty_init_checkpoint_is_refused(ws_root):
    text = _toml(ws_root).read_text()
    _toml(ws_root).write_text(
        text.replace('init_checkpoint = "models/init.safetensors"', 'init_checkpoint = ""')
    )
    with pytest.raises(WorkspaceError, match="init_checkpoint: is empty"):
        load_workspace(ws_root)


# ------------------------------------------------------------------ numbers and links


def test_numeric_api_refuses_cleanly():
    with pytest.raises(InputError, match="integer between 0 and"):
        wilson_interval(1, 10**400)
    with pytest.raises(InputError, match="bits"):
        wilson_interval(10**5000, 10**5000)


@pytest.mark.parametrize("text", ["²", "٣", "1" * 5000, "9" * 20, " ", "-1", "1e3"])
def test_link_numbers_are_ascii_digits_of_bounded_length(text):
    view, problems = decode("explore", {"n": text, "seed": text, "sigma": text})
    assert "subset_size" not in view.settings and "seed" not in view.settings
    assert len(problems) >= 2 and all(len(p) < 300 for p in problems)
    view, problems = decode("explore", {"target": text})
    assert view.target is None and len(problems) == 1


# ------------------------------------------------------------------ exports and weights

HOSTILE = ["=cmd|' /C calc'!A0", "+1+cmd", "@SUM(A1)", "-2+3+cmd", "\tx", "\rx"]


def _cells(text: str) -> list[str]:
    return [cell for row in csv.reader(io.StringIO(text, newline="")) for cell in row]


def test_csv_downloads_neutralise_formulas():
    frame = pd.DataFrame({"method": HOSTILE, "value": [-0.5, 1.0, 2.0, -3.0, 4.0, 5.0]})
    frame["text_number"] = "-0.25"
    frame[HOSTILE[0]] = 1
    downloaded = _cells(to_csv_bytes(frame).decode())
    assert not [c for c in downloaded if c.startswith(("=", "+", "@", "\t", "\r"))], downloaded
    assert "'=cmd|' /C calc'!A0" in downloaded and "'-2+3+cmd" in downloaded
    assert "-0.5" in downloaded and "-0.25" in downloaded  # numbers untouched


def test_complex_weights_are_refused(tmp_path):
    model = build_model("mlp", input_dim=4, hidden=(5,), num_classes=3)
    state = {k: v.to(torch.complex64) for k, v in model.state_dict().items()}
    kwargs = {"input_dim": 4, "hidden": [5], "num_classes": 3}
    torch.save({"state_dict": state, "arch": "mlp", "arch_kwargs": kwargs}, tmp_path / "c.pt")
    with pytest.raises(CheckpointError, match=r"complex-valued .* imaginary part"):
        load_checkpoint(tmp_path / "c.pt")


def test_no_file_appeared_outside(outside):
    assert not os.listdir(outside)


@pytest.mark.parametrize("page", ["compare", "explore"])
def test_links_with_odd_numbers_show_a_problem_not_an_exception(ws_root, monkeypatch, page):
    from streamlit.testing.v1 import AppTest

    app = Path(__file__).resolve().parents[2] / "app.py"
    monkeypatch.setenv("SDE_WORKSPACE", str(ws_root))
    monkeypatch.setenv("SDE_DATA_ROOTS", str(ws_root))
    at = AppTest.from_file(str(app), default_timeout=120)
    at.switch_page(f"pages/{page}.py")
    at.query_params.update({"n": "²", "seed": "9" * 5000, "target": "٣"})
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    shown = " ".join(str(w.value) for w in at.warning)
    assert "n=" in shown and "seed has 5000 characters" in shown, shown
