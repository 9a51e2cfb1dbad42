"""Tests of sde_core.learning.unlearning: each method does what it claims on a tiny memorisation
task."""

from __future__ import annotations

# Float tolerances in this file compare float32 activations computed twice in one process by
# the same torch kernels (through the hooks, and directly): they differ only by float32
# summation order, ~1e-6 relative. Results that cross machines are compared by
# sde_core.pipeline.reproduce (docs/method.md §13).
import copy
import dataclasses

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from sde_core.errors import TrainingError
from sde_core.learning.training import TrainConfig, train
from sde_core.learning.unlearning import (
    METHODS,
    FTParams,
    GAParams,
    L1SparseParams,
    RetrainParams,
    RLParams,
    SalUnParams,
    UnlearnData,
    UnrollParams,
    finetune,
    gradient_ascent,
    l1_sparse,
    parse_params,
    random_label,
    register_method,
    retrain,
    salun,
    salun_mask,
    unlearn,
    unroll,
)

N, D, C = 160, 12, 3
RECIPE = TrainConfig(epochs=60, batch_size=32, optimizer="adam", lr=1e-2, weight_decay=0.0, seed=0)
FAST = {"epochs": 3, "batch_size": 32}


def noise_task() -> TensorDataset:
    """Random labels on Gaussian noise: only memorisation fits the training set."""
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(N, D, generator=g), torch.randint(0, C, (N,), generator=g))


def make_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(D, 64), nn.ReLU(), nn.Linear(64, C))


@pytest.fixture(scope="module")
def setup():
    """(original model, its initial state, UnlearnData) with D_f = 20% of a memorised set."""
    data_set = noise_task()
    model = make_model()
    init = {k: v.clone() for k, v in model.state_dict().items()}
    train(model, data_set, RECIPE)
    forget = np.random.default_rng(0).choice(N, size=N // 5, replace=False)
    data = UnlearnData.from_forget(data_set, forget, train_config=RECIPE, init_state=init)
    return model, init, data


def forget_stats(model: nn.Module, data: UnlearnData) -> tuple[float, float]:
    """(mean CE, accuracy in %) of ``model`` on D_f in eval mode."""
    x, y = data.train.tensors[0][data.forget_idx], data.train.tensors[1][data.forget_idx]
    model.eval()
    with torch.no_grad():
        logits = model(x)
    ce = float(nn.functional.cross_entropy(logits, y))
    return ce, float(100 * (logits.argmax(1) == y).float().mean())


def states_equal(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return all(torch.equal(sa[k], sb[k]) for k in sa)


def test_original_memorised_the_forget_set(setup):
    model, _, data = setup
    assert forget_stats(model, data)[1] == 100.0


def test_every_builtin_leaves_the_original_untouched(setup):
    model, _, data = setup
    before = copy.deepcopy(model)
    for name in ("ft", "ga", "rl", "salun", "l1_sparse", "unroll", "retrain"):
        params = {} if name in ("unroll", "retrain") else FAST
        if name == "retrain":
            params = {"epochs": 2}
        result = unlearn(name, model, data, **params)
        assert result.method == name and result.seconds > 0
        assert not states_equal(result.model, model)
        assert not result.model.training
    assert states_equal(before, model)
    assert set(METHODS) >= {"ft", "ga", "l1_sparse", "retrain", "rl", "salun", "unroll"}


def test_neggrad_plus_raises_the_forget_loss_and_keeps_the_retained_set(setup):
    """NegGrad+ ascends D_f's loss while descending D_r's: D_f's CE rises, D_r stays fitted."""
    model, _, data = setup
    ce0, _ = forget_stats(model, data)
    result = unlearn("neggrad_plus", model, data, lr=0.05, beta=0.5, **FAST)
    assert result.params.clip_grad_norm == 100.0
    ce, _ = forget_stats(result.model, data)
    x, y = data.train.tensors[0][data.retain_idx], data.train.tensors[1][data.retain_idx]
    with torch.no_grad():
        retain_acc = float(100 * (result.model(x).argmax(1) == y).float().mean())
    assert ce > ce0 and retain_acc > 90.0
    with pytest.raises(TrainingError, match="beta"):
        unlearn("neggrad_plus", model, data, beta=1.5)


def test_ga_raises_forget_loss(setup):
    model, _, data = setup
    ce0, _ = forget_stats(model, data)
    default = gradient_ascent(model, data, GAParams())
    assert default.params.lr == 1e-4 and default.params.epochs == 5
    assert forget_stats(default.model, data)[0] > ce0
    strong = gradient_ascent(model, data, GAParams(lr=0.1, batch_size=8))
    ce_strong, acc_strong = forget_stats(strong.model, data)
    assert ce_strong > forget_stats(default.model, data)[0] > ce0
    assert acc_strong < 50.0


def test_ga_clips_the_gradient_norm(setup):
    model, _, data = setup
    one_step = GAParams(lr=1.0, epochs=1, batch_size=N, momentum=0.0, weight_decay=0.0)
    clip = GAParams(**{**dataclasses.asdict(one_step), "clip_grad_norm": 1e-3})
    moved = gradient_ascent(model, data, clip).model
    delta = torch.cat(
        [(p - q).flatten() for p, q in zip(moved.parameters(), model.parameters(), strict=True)]
    )
    assert float(delta.detach().norm()) == pytest.approx(1e-3, rel=1e-3)


def test_rl_changes_forget_predictions(setup):
    model, _, data = setup
    params = RLParams(epochs=3, batch_size=8)
    result = random_label(model, data, params)
    assert result.params == params and params.lr == 0.01
    ce_f, acc_f = forget_stats(result.model, data)
    ce_ft, acc_ft = forget_stats(
        finetune(model, data, FTParams(epochs=3, batch_size=8)).model, data
    )
    assert acc_f < 70.0 < acc_ft
    assert ce_f > 5 * ce_ft


def test_salun_mask_is_top_half_of_forget_saliency(setup):
    model, _, data = setup
    masks = salun_mask(model, data, mask_ratio=0.5, batch_size=N)  # one batch = all of D_f
    x, y = data.train.tensors[0][data.forget_idx], data.train.tensors[1][data.forget_idx]
    probe = copy.deepcopy(model).eval()
    grads = torch.autograd.grad(-nn.functional.cross_entropy(probe(x), y), list(probe.parameters()))
    scores = torch.cat([g.abs().flatten() for g in grads])
    flat = torch.cat([m.flatten() for m in masks.values()])
    k = int(scores.numel() * 0.5)
    assert int(flat.sum()) == k
    assert float(scores[flat == 1].min()) >= float(scores[flat == 0].max())


def test_salun_keeps_masked_out_weights_bit_identical(setup):
    model, _, data = setup
    params = SalUnParams(**FAST)
    assert params.lr == 0.013 and params.mask_ratio == 0.5
    result = salun(model, data, params)
    masks = salun_mask(model, data, 0.5, params.batch_size)
    original = dict(model.named_parameters())
    moved = 0
    for name, p in result.model.named_parameters():
        off = masks[name] == 0
        assert torch.equal(p[off], original[name][off]), name
        moved += int((p[~off] != original[name][~off]).sum())
    assert moved > 0.9 * result.info["masked_in"]
    assert result.info["masked_in"] == result.info["parameters"] // 2


def test_l1_sparse_shrinks_the_l1_norm(setup):
    model, _, data = setup
    ft = finetune(model, data, FTParams(**FAST)).model
    zero = l1_sparse(model, data, L1SparseParams(alpha=0.0, **FAST)).model
    assert states_equal(ft, zero)  # alpha = 0 is exactly FT
    default = l1_sparse(model, data, L1SparseParams(**FAST))
    strong = l1_sparse(model, data, L1SparseParams(alpha=0.1, **FAST)).model

    def l1(m: nn.Module) -> float:
        return float(sum(p.detach().abs().sum() for p in m.parameters()))

    assert default.params.alpha == 1e-4 and default.params.lr == 0.01
    assert l1(default.model) < l1(ft)
    assert l1(strong) < 0.95 * l1(ft)


def test_unroll_equals_closed_form(setup):
    model, init, data = setup
    result = unroll(model, data, UnrollParams())
    assert result.params.lr == RECIPE.lr and result.params.epochs_seen == RECIPE.epochs
    assert result.info["gradient_at"] == "init"
    at_init = make_model()
    at_init.load_state_dict(init)
    at_init.eval()
    x, y = data.train.tensors[0][data.forget_idx], data.train.tensors[1][data.forget_idx]
    grads = torch.autograd.grad(
        nn.functional.cross_entropy(at_init(x), y), list(at_init.parameters())
    )
    for (name, p), p_or, g in zip(
        result.model.named_parameters(), model.parameters(), grads, strict=True
    ):
        expected = p_or.detach() + RECIPE.lr * RECIPE.epochs * g
        torch.testing.assert_close(p.detach(), expected, rtol=0, atol=1e-6, msg=name)
    assert forget_stats(result.model, data)[0] != forget_stats(model, data)[0]


def test_unroll_without_recipe_needs_explicit_values(setup):
    model, _, data = setup
    bare = UnlearnData(data.train, data.forget_idx, data.retain_idx)
    with pytest.raises(TrainingError, match="epochs_seen"):
        unroll(model, bare, UnrollParams())
    result = unroll(model, bare, UnrollParams(lr=0.1, epochs_seen=2))
    assert result.info["gradient_at"] == "original"


class Recording(Dataset):
    """Wraps a dataset and records every index read."""

    def __init__(self, inner: Dataset) -> None:
        self.inner, self.seen = inner, set()

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int):
        self.seen.add(int(i))
        return self.inner[i]


def test_retrain_never_sees_the_forget_set(setup):
    model, _, data = setup
    recorder = Recording(data.train)
    spy = UnlearnData(recorder, data.forget_idx, data.retain_idx, train_config=RECIPE)
    result = retrain(model, spy, RetrainParams(epochs=3))
    assert recorder.seen == set(data.retain_idx.tolist())
    assert result.params == RetrainParams(
        epochs=3,
        batch_size=32,
        optimizer="adam",
        lr=1e-2,
        momentum=0.9,
        weight_decay=0.0,
        schedule="constant",
        augmentation="none",
        seed=0,
    )
    assert forget_stats(result.model, data)[1] < 70.0  # unseen random labels are not predicted


def test_retrain_uses_factory_and_needs_a_recipe(setup):
    model, _, data = setup
    bare = UnlearnData(data.train, data.forget_idx, data.retain_idx)
    with pytest.raises(TrainingError, match="recipe"):
        retrain(model, bare, RetrainParams(epochs=1))
    built = []
    with_factory = dataclasses.replace(
        bare, model_factory=lambda: built.append(1) or make_model(seed=7)
    )
    recipe = {f.name: getattr(RECIPE, f.name) for f in dataclasses.fields(RetrainParams)}
    out = retrain(model, with_factory, RetrainParams(**{**recipe, "epochs": 1}))
    assert built == [1] and out.params.epochs == 1 and out.params.optimizer == "adam"


def test_register_custom_method_and_dispatch_errors(setup):
    model, _, data = setup

    @dataclasses.dataclass(frozen=True)
    class ScaleParams:
        factor: float = 0.5

    def scale(original, d, params):
        m = copy.deepcopy(original)
        with torch.no_grad():
            for p in m.parameters():
                p.mul_(params.factor)
        return m

    register_method("scale_test", scale, ScaleParams, replace=True)
    result = unlearn("scale_test", model, data, factor=0.25)
    assert result.params == ScaleParams(0.25) and result.seconds >= 0
    first = next(result.model.parameters())
    assert torch.equal(first, next(model.parameters()) * 0.25)
    with pytest.raises(TrainingError, match=r"valid parameters: \['factor'\]"):
        unlearn("scale_test", model, data, lr=0.1)
    with pytest.raises(TrainingError, match="already registered"):
        register_method("scale_test", scale, ScaleParams)
    with pytest.raises(TrainingError, match="unknown unlearning method"):
        unlearn("nope", model, data)
    with pytest.raises(TrainingError, match="lr"):
        unlearn("ft", model, data, lr=-1.0)
    del METHODS["scale_test"]


def test_parse_params_coerces_text():
    assert parse_params("ga", {"lr": "0.001", "epochs": "2", "clip_grad_norm": "5"}) == {
        "lr": 0.001,
        "epochs": 2,
        "clip_grad_norm": 5.0,
    }
    assert parse_params("unroll", {"lr": "none", "epochs_seen": "3"}) == {
        "lr": None,
        "epochs_seen": 3,
    }
    with pytest.raises(TrainingError, match="not a valid int"):
        parse_params("ft", {"epochs": "2.5"})
    with pytest.raises(TrainingError, match="valid parameters"):
        parse_params("ft", {"alpha": "1"})


@pytest.mark.parametrize(
    ("forget", "retain", "match"),
    [
        ([0, 1], [1, 2], "overlap"),
        ([0, N], [1], "outside"),
        ([], [1], "empty"),
        ([0, 0], [1], "duplicate"),
        ([0.5], [1], "integers"),
    ],
)
def test_unlearn_data_validation(forget, retain, match):
    with pytest.raises(TrainingError, match=match):
        UnlearnData(noise_task(), np.array(forget), np.array(retain))
