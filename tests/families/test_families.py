"""The model-family seam (sde_core/families): detection, the registry and what each family
declares, checked against the code that acts on it."""

from __future__ import annotations

import importlib
import json

import pytest
import torch
from torch import nn

from sde_core.families.causal_lm import CAUSAL_LM
from sde_core.families.classifier import CLASSIFIER
from sde_core.families.denoiser import DENOISER
from sde_core.families.registry import (
    FAMILIES,
    family_by_arch,
    family_named,
    family_of,
    family_of_entry,
    folder_family,
)
from sde_core.inputs.architectures import build_model, model_layer_refs
from sde_core.inputs.denoisers import DENOISED
from sde_core.learning.unlearning import METHODS
from sde_core.pipeline.settings import NOISE_LEVELS
from sde_core.pipeline.workspace import ModelEntry, Workspace
from sde_core.services.workspace_info import weak_layer_advice

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _denoiser() -> nn.Module:
    torch.manual_seed(0)
    return build_model("edm_unet", in_channels=1, channels=[4, 8], emb_dim=8, image_size=8)


def test_each_model_is_detected_as_its_family():
    assert family_of(_denoiser()) is DENOISER
    assert family_of(build_model("mlp", input_dim=4, num_classes=3)) is CLASSIFIER
    wrapper = nn.Linear(2, 2)
    wrapper.sde_arch = "hf"  # what HFHiddenStates carries
    assert family_of(wrapper) is CAUSAL_LM
    assert [f.name for f in FAMILIES][-1] == "classifier"  # the default is asked last
    assert family_named("denoiser") is DENOISER
    with pytest.raises(KeyError, match="no model family 'vit'"):
        family_named("vit")


def test_arch_folder_and_entry_lookups(tmp_path):
    assert family_by_arch("hf") is CAUSAL_LM
    assert family_by_arch("resnet18") is None and family_by_arch("") is None
    folder = tmp_path / "lm"
    folder.mkdir()
    assert folder_family(None, folder) is None  # no config.json, no weights: no model
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    assert folder_family(None, folder) is None  # a config without weights
    (folder / "model.safetensors").write_bytes(b"")
    assert folder_family("resnet18", folder) is CAUSAL_LM
    assert folder_family("hf", tmp_path) is CAUSAL_LM  # the arch names the route
    assert family_of_entry("hf", "final") is CAUSAL_LM
    assert family_of_entry("edm_unet", f"{DENOISED}@0.5") is DENOISER
    assert family_of_entry("mlp", "output") is CLASSIFIER


def test_output_aliases_are_what_the_layers_offer():
    assert DENOISER.output_aliases == {DENOISED: ":flat"}
    assert set(model_layer_refs(_denoiser())) >= {DENOISED}
    assert "output" not in model_layer_refs(_denoiser())  # no softmax of a denoiser
    assert {"output", "logits", "penultimate"} <= set(
        model_layer_refs(build_model("mlp", input_dim=4, num_classes=3))
    )
    strongest = DENOISER.default_layer
    assert strongest.split("@")[0] == DENOISED and float(strongest.split("@")[1]) in NOISE_LEVELS


def test_declared_methods_are_registered_and_refusals_name_a_method():
    for family in FAMILIES:
        assert family.methods is None or family.methods <= set(METHODS), family.name
        assert set(family.refusals) <= set(METHODS), family.name
        assert not (family.methods or set()) & set(family.refusals), family.name
    llm = {m for m in METHODS if m.startswith("llm_")}
    assert CAUSAL_LM.methods == llm
    assert CLASSIFIER.methods == set(METHODS) - llm


def _resolves(dotted: str) -> bool:
    module, _, name = dotted.rpartition(".")
    return callable(getattr(importlib.import_module(module), name, None))


def test_behaviour_and_objective_name_existing_functions():
    for family in FAMILIES:
        assert _resolves(family.objective_by), family.objective_by
        assert family.behaviour, family.name
        for measure in family.behaviour:
            assert measure.computed_by or measure.pending, (family.name, measure.key)
            if measure.computed_by:
                assert _resolves(measure.computed_by), measure.computed_by
    assert [m.key for m in CLASSIFIER.behaviour][:2] == ["accuracy", "attack"]
    assert [m.key for m in CAUSAL_LM.behaviour] == [
        "token_loss",
        "likelihood_attack",
        "behaviour_check",
    ]


def test_the_softmax_hint_is_the_classifiers_only():
    assert "softmax" in CLASSIFIER.advice["weak_layer"]
    for family in FAMILIES:
        if family is not CLASSIFIER:
            assert "softmax" not in family.advice["weak_layer"] + family.advice["weak_output"]


def test_the_dashboard_advice_follows_the_models_family(tmp_path):
    ws = Workspace(root=tmp_path, dataset={"kind": "npz"}, forget_indices="forget.npy")
    for name, arch in (("cnn", "fmnist_cnn"), ("edm", "edm_unet"), ("lm", "hf")):
        ws.add_model(ModelEntry(name=name, role="original", arch=arch, checkpoint="m"))
    assert weak_layer_advice(ws, "cnn", "penultimate") == CLASSIFIER.advice["weak_layer"]
    assert weak_layer_advice(ws, "cnn", "output") == CLASSIFIER.advice["weak_output"]
    assert weak_layer_advice(ws, "edm", "denoised@0.5") == DENOISER.advice["weak_output"]
    assert weak_layer_advice(ws, "lm", "layer.1") == CAUSAL_LM.advice["weak_layer"]
    assert "softmax" not in weak_layer_advice(ws, "lm", "output")


def test_the_answer_page_names_each_demo_family_through_the_seam() -> None:
    """model_family asks the family registry: a denoiser, a causal LM and classifiers."""
    from pathlib import Path

    from sde_core.pipeline.workspace_load import load_workspace
    from sde_core.services.answer import model_family
    from sde_core.viz.family_texts import behaviour_missing

    assets = Path(__file__).resolve().parents[2] / "assets"
    found = {d: model_family(load_workspace(assets / d)) for d in
             ("demo", "demo-mnist1d", "demo-facts", "demo-fashion-edm")}  # fmt: skip
    assert found == {
        "demo": CLASSIFIER.label, "demo-mnist1d": CLASSIFIER.label,
        "demo-facts": CAUSAL_LM.label, "demo-fashion-edm": DENOISER.label,
    }  # fmt: skip
    assert behaviour_missing(CAUSAL_LM.label) == "n/a (causal language model)"
    assert behaviour_missing(CLASSIFIER.label) == "n/a"


def test_every_family_without_class_scores_has_its_behaviour_stage():
    """A family whose behaviour cannot come from class scores declares computed measures and
    the behaviour stage measures it (pipeline/evaluation/behaviour.py); the others use the
    classic stage or say why they are pending."""
    from sde_core.pipeline.evaluation.behaviour import FAMILY_MEASURES

    for family in FAMILIES:
        computed = [m for m in family.behaviour if not m.pending]
        if family.name in FAMILY_MEASURES:
            assert not family.has_class_outputs and computed, family.name
            assert any(m.key == "behaviour_check" for m in computed), family.name
        elif not family.has_class_outputs:  # e.g. the toy signal regressor: says so
            assert all(m.pending for m in family.behaviour), family.name
