"""Tests of sde_core.pipeline.workspace: round trip, every invalid field, load errors and
hashing."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.workspaces import MLP_KWARGS, N_TRAIN, make_workspace

from sde_core.errors import PathError, WorkspaceError
from sde_core.inputs.architectures import build_model
from sde_core.learning.training import save_weights
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.workspace import (
    PRECOMPUTED,
    WORKSPACE_FILE,
    CheckpointRef,
    ModelEntry,
    Problem,
    Workspace,
    cache_path,
    check_model_name,
    workspace_hash,
)
from sde_core.pipeline.workspace_checks import check_workspace, validate_workspace
from sde_core.pipeline.workspace_load import defaults_from_table, load_workspace
from sde_core.pipeline.workspace_write import (
    commit_files,
    fresh_model_path,
    rehash_models,
    write_workspace,
)


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return make_workspace(tmp_path)


def test_round_trip(ws):
    loaded = load_workspace(ws.root)
    assert loaded == ws
    assert loaded.defaults.sigma == 2.5 and loaded.models[0].checkpoints[0].fraction == 0.5
    assert validate_workspace(loaded, check_data=True) == []
    assert not list(ws.root.glob("*.tmp"))
    assert load_workspace(ws.root / "workspace.toml") == ws
    spec = loaded.dataset_spec()
    assert Path(spec.root) == ws.root / "data.npz"


def _set(attr: str, value: object) -> Callable[[Workspace], None]:
    def apply(w: Workspace) -> None:
        target: object = w
        *path, last = attr.split(".")
        for part in path:
            target = target[int(part)] if part.isdigit() else getattr(target, part)  # type: ignore[index]
        setattr(target, last, value)

    return apply


def _write(name: str, content: bytes) -> Callable[[Workspace], None]:
    def apply(w: Workspace) -> None:
        (w.root / name).write_bytes(content)

    return apply


def _duplicate_original(w: Workspace) -> None:
    w.models.append(dataclasses.replace(w.models[0], name="other"))


def _duplicate_name(w: Workspace) -> None:
    w.models[1].name = "original"


def _save_npy(values: list[int]) -> Callable[[Workspace], None]:
    def apply(w: Workspace) -> None:
        np.save(w.root / "forget.npy", np.array(values))

    return apply


@pytest.mark.parametrize(
    ("mutate", "field", "severity", "text"),
    [
        (_set("models.0.role", "teacher"), "models[0].role", "error", "not a role"),
        (_duplicate_original, "models", "error", "role 'original'"),
        (_duplicate_name, "models[1].name", "error", "used twice"),
        (_set("models.1.name", " "), "models[1].name", "error", "empty"),
        (_set("models.0.arch", "vgg99"), "models[0].arch", "error", "unknown architecture"),
        (
            _set("models.0.checkpoint", "models/nope.pt"),
            "models[0].checkpoint",
            "error",
            "not exist",
        ),
        (
            _set("models.0.init_checkpoint", "x.pt"),
            "models[0].init_checkpoint",
            "error",
            "not exist",
        ),
        (
            _set("models.0.checkpoints", [CheckpointRef(1.5, "models/ckpt_050.safetensors")]),
            "models[0].checkpoints[0].fraction",
            "error",
            "outside",
        ),
        (
            _set("models.0.checkpoints", [CheckpointRef(0.5, "gone.safetensors")]),
            "models[0].checkpoints[0].path",
            "error",
            "not exist",
        ),
        (_set("models.0.seconds", -1.0), "models[0].seconds", "error", "non-negative"),
        (_set("models.0.sha256", "0" * 64), "models[0].sha256", "warning", "changed"),
        (_set("forget_indices", "missing.npy"), "forget_indices", "error", "not exist"),
        (_save_npy([1, 1, 2]), "forget_indices", "error", "duplicate"),
        (
            _save_npy([1, N_TRAIN + 5]),
            "forget_indices",
            "error",
            r"\[0, 49\]; offending values: \[55\]",
        ),
        (_write("forget.npy", b"garbage"), "forget_indices", "error", "cannot read"),
        (_set("dataset", {"kind": "npz", "root": "nowhere.npz"}), "dataset.root", "error", "exist"),
        (_set("dataset", {"kind": "npz", "rooot": "data.npz"}), "dataset", "error", "unknown keys"),
    ],
)
def test_every_invalid_field_is_reported(ws, mutate, field, severity, text):
    mutate(ws)
    problems = validate_workspace(ws, check_data=True)
    hits = [p for p in problems if p.field == field]
    assert hits, problems
    assert hits[0].severity == severity
    assert any(re.search(text, p.message) for p in hits), hits
    if severity == "error":
        with pytest.raises(WorkspaceError, match=re.escape(field)):
            check_workspace(ws, check_data=True)
    else:
        assert check_workspace(ws, check_data=True) == hits


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda t: t + "\n[[models]\n", "not valid TOML"),
        (lambda t: "colour = 1\n" + t, "unknown top-level key"),
        (
            lambda t: t.replace('name = "original"', 'name = "original"\nweights = "x"'),
            "unknown key",
        ),
        (
            lambda t: t.replace("seed = 0\nseconds", 'seed = "zero"\nseconds'),
            "models\\[0\\].seed: expected an integer",
        ),
        (lambda t: t.replace('role = "random"\n', ""), "missing required key"),
        (lambda t: t.replace("subset_size = 20", "subset_size = 20.5"), "defaults.subset_size"),
        (lambda t: t.replace("version = 1", "version = 7"), "version"),
        (lambda t: t.replace('forget_indices = "forget.npy"', ""), "forget_indices"),
    ],
)
def test_load_errors_name_the_problem(ws, edit, match):
    file = ws.root / "workspace.toml"
    file.write_text(edit(file.read_text()))
    with pytest.raises(WorkspaceError, match=match):
        load_workspace(ws.root)


def test_load_validates_by_default(ws, tmp_path):
    (ws.root / "models" / "random.safetensors").unlink()
    with pytest.raises(WorkspaceError, match=r"models\[1\]\.checkpoint"):
        load_workspace(ws.root)
    assert load_workspace(ws.root, validate=False).models[1].name == "rand"
    with pytest.raises(WorkspaceError, match="does not exist"):
        load_workspace(tmp_path / "empty")


def test_hash_depends_on_content_not_location(ws, tmp_path):
    h = workspace_hash(ws)
    copy_root = tmp_path.parent / (tmp_path.name + "_copy")
    shutil.copytree(ws.root, copy_root)
    moved = load_workspace(copy_root)
    assert workspace_hash(moved) == h
    assert workspace_hash(moved, data_fingerprint="abc") != h
    torch.manual_seed(99)
    save_weights(
        build_model("mlp", **MLP_KWARGS), copy_root / "models/final.safetensors", arch="mlp"
    )
    assert workspace_hash(moved) != h
    assert [p.field for p in validate_workspace(moved)] == ["models[0].sha256"]
    assert rehash_models(moved) == ["original"]
    assert validate_workspace(moved) == []


def test_hashes_of_workspaces_over_the_same_files_share_their_reads(ws, monkeypatch):
    """``file_hashes`` (one operation hashing workspaces that share files, e.g. a curve's
    checkpoint workspaces): the same hashes, each file read once."""
    import sde_core.pipeline.workspace as workspace_module

    plain = workspace_hash(ws)
    other = dataclasses.replace(ws, models=ws.models[:1])
    other_plain = workspace_hash(other)
    reads: list[Path] = []
    real = workspace_module.file_sha256

    def counted(path):
        reads.append(Path(path))
        return real(path)

    monkeypatch.setattr(workspace_module, "file_sha256", counted)
    known: dict[Path, str] = {}
    assert workspace_hash(ws, file_hashes=known) == plain
    assert workspace_hash(other, file_hashes=known) == other_plain
    assert len(reads) == len(set(reads)) == len(known)  # each file once


def test_model_lookup_and_add(ws):
    assert ws.original().name == "original"
    assert ws.model("rand").role == "random"
    with pytest.raises(WorkspaceError, match="no model 'x'"):
        ws.model("x")
    with pytest.raises(WorkspaceError, match="already exists"):
        ws.add_model(ModelEntry("rand", "random", "mlp", "models/random.safetensors"))
    ws.add_model(ModelEntry("rand", "random", "mlp", "models/init.safetensors"), replace=True)
    assert ws.model("rand").checkpoint == "models/init.safetensors"
    ws.models = [ws.model("rand")]
    with pytest.raises(WorkspaceError, match="no model with role 'original'"):
        ws.original()


def test_problem_str():
    assert str(Problem("models[0].role", "bad")) == "models[0].role: bad"


def test_generated_dataset_cache_need_not_exist_yet(ws):
    ws.dataset = {"kind": "mnist1d", "root": "cache/mnist1d.npz", "options": {"num_samples": 100}}
    assert [p for p in validate_workspace(ws) if p.field.startswith("dataset")] == []


# ------------------------------------------------------------------------------- [defaults]


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ('sigma = "silverman"', {"defaults.sigma": "sigma must be"}),
        ("sigma = -1.0", {"defaults.sigma": "> 0"}),
        ("alpha = 2.0", {"defaults.alpha": "> 0 and < 1"}),
        ('estimator = "debiased"', {"defaults.estimator": "'biased'"}),
        ("subset_size = 2", {"defaults.subset_size": "integer between 4 and 32768"}),
        ('layer = ""', {"defaults.layer": "non-empty"}),
        ("panel_size = 5", {"defaults.panel_size": "panel_size"}),
        ("pool = 1", {"defaults.pool": "expected bool"}),
        ("colour = 1", {"defaults.colour": "unknown setting"}),
        (
            "targets = 1\nsplits = 1\nalpha_calibrated = 0.0",
            {
                "defaults.targets": "targets",
                "defaults.splits": "splits",
                "defaults.alpha_calibrated": "> 0 and < 1",
            },
        ),
    ],
)
def test_defaults_one_problem_per_field(ws, lines, expected):
    file = ws.root / "workspace.toml"
    text = file.read_text()
    start = text.index("[defaults]")
    end = text.index("\n[", start + 1) if "\n[" in text[start + 1 :] else len(text)
    file.write_text(text[:start] + "[defaults]\n" + lines + "\n" + text[end:])
    with pytest.raises(WorkspaceError) as info:
        load_workspace(ws.root, validate=False)
    message = str(info.value)
    assert f"{len(expected)} problem(s) in [defaults]" in message
    for field, pattern in expected.items():
        assert re.search(re.escape(field) + ": [^;]*" + pattern, message), message


def test_defaults_are_eval_settings_and_cross_field_rules_use_the_table():
    settings, problems = defaults_from_table({"panel_size": 200, "alpha_calibrated": 0.01})
    assert problems == [] and isinstance(settings, EvalSettings)
    assert (settings.panel_size, settings.alpha_calibrated) == (200, 0.01)
    settings, problems = defaults_from_table({"sigma": 2, "alpha_calibrated": 0.01})
    assert settings.sigma == 2.0 and isinstance(settings.sigma, float)
    assert [p.field for p in problems] == ["defaults.alpha_calibrated"]  # R = 20 is too small
    assert defaults_from_table([1])[1][0].field == "defaults"


def test_every_settings_field_round_trips(ws):
    fields = {f.name for f in dataclasses.fields(EvalSettings)}
    written = (ws.root / "workspace.toml").read_text()
    for name in fields:
        assert f"\n{name} = " in written
    assert load_workspace(ws.root).defaults == ws.defaults


# ------------------------------------------------------------------------------- models


@pytest.mark.parametrize("name", ["a/b", "../x", "", ".hidden", "x" * 65, "a b", "é", "a\x00b"])
def test_unsafe_model_names_are_refused(ws, name):
    with pytest.raises(WorkspaceError, match="is not allowed"):
        check_model_name(name)
    with pytest.raises(WorkspaceError, match=r"not allowed|empty"):
        ws.add_model(ModelEntry(name, "random", "mlp", "models/random.safetensors"))
    ws.models[1].name = name
    assert any(p.field == "models[1].name" for p in validate_workspace(ws))


def test_arch_may_be_read_from_the_file(ws):
    ws.models[1].arch = ""
    write_workspace(ws)
    assert 'arch = "mlp"' in (ws.root / "workspace.toml").read_text()  # the original keeps its
    loaded = load_workspace(ws.root)
    assert loaded.models[1].arch == "" and validate_workspace(loaded) == []


def test_trusted_and_activations_round_trip_and_precomputed_rules(ws):
    np.savez(ws.root / "acts.npz", train_h=np.zeros((N_TRAIN, 2)), test_h=np.zeros((20, 2)))
    ws.models[1].trusted = True
    ws.add_model(ModelEntry("pre", "unlearned", PRECOMPUTED, activations="acts.npz"))
    write_workspace(ws)
    loaded = load_workspace(ws.root)
    assert loaded.models[1].trusted and loaded.model("pre").activations == "acts.npz"
    assert "trusted = false" not in (ws.root / "workspace.toml").read_text()
    loaded.model("pre").activations = None
    loaded.model("rand").checkpoint = ""
    fields = {p.field for p in validate_workspace(loaded)}
    assert {"models[2].activations", "models[1].checkpoint"} <= fields


def test_no_models_says_how_to_add_one(ws):
    ws.models = []
    problems = validate_workspace(ws)
    assert [p.field for p in problems] == ["models"] and "add-model" in problems[0].message
    with pytest.raises(WorkspaceError, match="has no models to evaluate"):
        workspace_hash(ws)


def test_cache_paths_and_fresh_model_paths(ws):
    assert cache_path(ws.root, "activations") == ws.root / ".sde-cache" / "activations"
    assert cache_path(ws.root, "results") == ws.root / ".sde-cache" / "results.sqlite"
    with pytest.raises(WorkspaceError, match="unknown cache kind"):
        cache_path(ws.root, "tmp")
    assert fresh_model_path(ws, "models/final.safetensors") == "models/final-2.safetensors"
    assert fresh_model_path(ws, "models") == "models-2"  # the folder holds referenced files
    assert fresh_model_path(ws, "models/new") == "models/new"


# ------------------------------------------------------------------------------- atomic writes


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_commit_files_is_all_or_nothing(ws, monkeypatch):
    before = _snapshot(ws.root)
    real = os.replace
    calls = []

    def flaky(src, dst):
        calls.append(dst)
        if len(calls) == 4:  # fail half-way through the moves
            raise OSError("disk full")
        return real(src, dst)

    monkeypatch.setattr("sde_core.common.staging.os.replace", flaky)
    with pytest.raises(OSError, match="disk full"):
        commit_files(ws.root, {"forget.npy": b"new", "models/x.bin": b"x", WORKSPACE_FILE: b"y"})
    monkeypatch.setattr("sde_core.common.staging.os.replace", real)
    assert _snapshot(ws.root) == before
    assert sorted(p.name for p in ws.root.iterdir()) == sorted(
        p for p in {"data.npz", "forget.npy", "models", "workspace.toml"}
    )
    written = commit_files(
        ws.root, {"notes/a.txt": b"a", WORKSPACE_FILE: (ws.root / WORKSPACE_FILE).read_bytes()}
    )
    assert [p.name for p in written] == ["a.txt", WORKSPACE_FILE]
    with pytest.raises(PathError, match="outside"):
        commit_files(ws.root, {"/etc/x": b""})


def test_a_stated_criterion_round_trips_and_a_bad_one_is_refused(ws):
    """[criterion] (the answer page's yardstick): absent = the default, stated = kept as
    written, a value out of range = a WorkspaceError naming the key."""
    from sde_core.pipeline.criterion import Criterion

    assert load_workspace(ws.root).criterion == Criterion() and not ws.criterion.stated
    ws.criterion = Criterion(metric="otr", margin=0.05, behaviour=False, stated=True)
    write_workspace(ws)
    text = (ws.root / "workspace.toml").read_text()
    assert "[criterion]" in text and 'metric = "otr"' in text
    loaded = load_workspace(ws.root)
    assert loaded.criterion == ws.criterion
    assert loaded.criterion.describe().startswith("OTR within 0.05 of the retrained model's")
    assert "the default" not in loaded.criterion.describe()
    for bad, words in (
        ("margin = 1.5", "criterion.margin must lie strictly between 0 and 1"),
        ('metric = "f1"', "criterion.metric 'f1' is not one of"),
        ("behaviour = 1", "criterion.behaviour must be true or false"),
        ("width = 0.1", "unknown key(s) ['width'] in [criterion]"),
    ):
        body = re.sub(r"\[criterion\][^\[]*", f"[criterion]\n{bad}\n\n", text)
        (ws.root / "workspace.toml").write_text(body)
        with pytest.raises(WorkspaceError, match=re.escape(words)):
            load_workspace(ws.root)


def test_the_criterion_compares_the_otr_or_the_calibrated_otr():
    """The criterion's rates come from the paired comparisons and the metric table."""
    from sde_core.pipeline.criterion import CRITERION_METRICS, DEFAULT_METRIC, Criterion

    assert CRITERION_METRICS == {"otr": "OTR", "calibrated_otr": "calibrated OTR"}
    assert Criterion().metric == DEFAULT_METRIC == "calibrated_otr"


def test_the_first_model_of_a_role_is_looked_up_in_one_place(ws):
    import dataclasses

    import pandas as pd

    from sde_core.pipeline.evaluation.comparisons import first_with_role

    base = ws.models[0]
    ws.models = [
        base,
        dataclasses.replace(base, name="re1", role="retrained"),
        dataclasses.replace(base, name="re2", role="retrained"),
    ]
    assert ws.named("retrained") == ["re1", "re2"]
    assert ws.first("retrained") == "re1"
    assert ws.first("retrained", other_than="re1") == "re2"
    assert ws.first("random") is None and ws.named("random") == []
    table = pd.DataFrame({"name": [m.name for m in ws.models], "role": [m.role for m in ws.models]})
    assert first_with_role(table, "retrained") == "re1"
    assert first_with_role(table, "unlearned") is None
    assert first_with_role(table.drop(columns="role"), "retrained") is None


def test_a_second_original_model_is_refused_with_the_existing_one_named(ws):
    import dataclasses

    from sde_core.services.workspace_models import _check_addition

    second = dataclasses.replace(ws.models[0], name="original2")
    with pytest.raises(WorkspaceError, match=r"already has an original model \('original'\)"):
        _check_addition(ws, second, replace=False)
    _check_addition(ws, ws.models[0], replace=True)  # replacing the original itself is fine
    _check_addition(ws, dataclasses.replace(second, role="unlearned"), replace=False)
