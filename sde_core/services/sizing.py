"""Does a model fit the data, and what subset size does the data allow (no UI code).

:func:`check_fits` runs a loaded model on two training samples (input shape, number of classes),
:func:`check_outputs` checks an activations file's outputs; :func:`suggest_subset_size` chooses
the subset size n that D_tr, D_te and D_f allow, and :func:`null_check_limit` /
:func:`null_check_warning` say how large n may be for the null check on D_te.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.errors import CheckpointError, DataError, SettingsError
from sde_core.families.registry import family_of
from sde_core.pipeline.settings import EvalSettings

__all__ = [
    "check_fits",
    "check_outputs",
    "null_check_limit",
    "null_check_warning",
    "suggest_subset_size",
]


def _fit_inputs(bundle: Any) -> Any:
    """The first (at most) two training samples, the batch :func:`check_fits` runs."""
    x, _ = bundle.train.get_batch(np.arange(min(2, len(bundle.train))))
    return x


def _fit_failure(bundle: Any, problem: str) -> CheckpointError:
    return CheckpointError(
        f"the model cannot process the dataset's inputs of shape {tuple(bundle.input_shape)} "
        f"({problem}): check the architecture, its kwargs and the dataset"
    )


def check_fits(model: Any, bundle: Any, folder: Path | None = None) -> int:
    """Run ``model`` on two training samples and check it fits the dataset (a language model
    reads them as it will be evaluated: tokenised by its own folder's tokenizer when it has
    one, :func:`~sde_core.inputs.text_data.model_view`; ``folder`` is its model folder).

    Returns:
        The number of outputs per sample.

    Raises:
        CheckpointError: the model cannot process the inputs, or its number of outputs differs
            from the dataset's number of classes (the message says which kwarg to pass).
    """
    import torch

    from sde_core.inputs.text_data import model_view

    if folder is not None and folder.is_dir():
        bundle = model_view(bundle, folder)
    try:
        with torch.inference_mode():
            out = model(_fit_inputs(bundle))
    except (RuntimeError, ValueError, TypeError, IndexError) as exc:
        from sde_core.inputs.text_data import vocabulary_problem

        said = vocabulary_problem(bundle, model, folder)  # a language model: the tokens, named
        if said:
            raise CheckpointError(said) from None
        first = str(exc).strip().split("\n")[0][:200]
        raise _fit_failure(bundle, f"{type(exc).__name__}: {first}") from None
    if isinstance(out, tuple | list):
        out = out[0]
    if not isinstance(out, torch.Tensor):
        return check_outputs(type(out).__name__, bundle)
    if not family_of(model).has_class_outputs:  # no classes to count (a regressor's number)
        return int(out[0].numel())
    return check_outputs(tuple(out.shape), bundle)


def _outputs(model: Any, x: np.ndarray, batch: int = 50) -> np.ndarray | None:
    """``model``'s outputs on ``x`` in batches (the first element of a tuple output), or None
    when they are not tensors."""
    import torch

    parts = []
    with torch.inference_mode():
        for start in range(0, len(x), batch):
            out = model(torch.from_numpy(x[start : start + batch]))
            out = out[0] if isinstance(out, tuple | list) else out
            if not isinstance(out, torch.Tensor):
                return None
            parts.append(out.float().cpu().numpy())
    return np.concatenate(parts) if parts else None


def check_outputs(shape: tuple[int, ...] | str, bundle: Any) -> int:
    """The number of outputs per sample of a model whose output for a batch has ``shape``
    (the type's name when it is not a tensor), checked against the dataset's classes.

    Raises:
        CheckpointError: not ``(batch, classes)``, or another number of classes.
    """
    if isinstance(shape, str) or len(shape) != 2:
        raise CheckpointError(
            f"the model returns {shape} for a batch; a classifier returns (batch, classes)"
        )
    outputs = int(shape[1])
    if bundle.num_classes >= 2 and outputs != bundle.num_classes:
        raise CheckpointError(
            f"the model has {outputs} outputs but the dataset has {bundle.num_classes} classes: "
            f"pass the architecture's class count (e.g. --arch-kwarg num_classes="
            f"{bundle.num_classes}) or choose the matching dataset"
        )
    return outputs


def _activation_layers(file: Path, name: str, bundle: Any) -> list[str]:
    """The layers of a model's activations file, after checking its rows fit the dataset."""
    from sde_core.inputs.precomputed import load_precomputed

    pre = load_precomputed(file, model=name)
    for split in ("train", "test"):
        rows = next(iter(pre.features[split].values())).shape[0]
        n_split = len(bundle.split(split))
        source = bundle.source_indices[split]
        if rows != n_split and (source.size == 0 or rows <= int(source.max())):
            raise DataError(
                f"{file} has {rows} {split} rows but the dataset's {split} split has {n_split}: "
                "export one row per sample, in the dataset's order"
            )
    return pre.layers


def null_check_limit(n_test: int) -> int:
    """The largest subset size that keeps the null check on: two disjoint subsets of n rows in
    the control half of D_te (method §12), i.e. n ≤ ⌊⌊|D_te|/2⌋/2⌋."""
    return (int(n_test) // 2) // 2


def null_check_warning(n: int, n_test: int) -> str | None:
    """A sentence saying, before any run, that subset size ``n`` switches the null check off
    (and the largest n that keeps it), or None when it stays on."""
    limit = null_check_limit(n_test)
    if n <= limit:
        return None
    return (
        f"warning: subset size {n} switches the null check off — it needs two disjoint subsets "
        f"of n rows in the control half of D_te ({n_test // 2} rows); choose n ≤ {limit} to "
        "keep it (without it a model shown over-unlearned has no false-positive check beside it)"
    )


def suggest_subset_size(
    n_train: int, n_test: int, forget: np.ndarray, base: EvalSettings | None = None
) -> int:
    """The largest round subset size n (at most ``base.subset_size``) the evaluation can draw
    with every part disjoint as method §12 asks: n ≤ |D_f| (targets), a reference and a control
    half of D_r of at least n each, and two disjoint subsets of n in the control half of D_te
    for the null check (n ≤ |D_te|/4; the reference half then holds the OOT reference and its
    panel), confirmed by the evaluation's own subset drawing. When D_te is too small for a null
    check with n ≥ 4, the largest n without it (:func:`null_check_warning` says so).

    Raises:
        DataError: the pools are too small for any subset (n < 4).
    """
    from sde_core.pipeline.evaluation.plan import draw_subsets

    base = base or EvalSettings()
    f = np.unique(np.asarray(forget, dtype=np.int64))
    cap = min(base.subset_size, f.size, (n_train - f.size) // 2, n_test // 2)
    if null_check_limit(n_test) >= 4:
        cap = min(cap, null_check_limit(n_test))
    n = _round_down(cap)
    while n >= 4:
        try:
            draw_subsets(n_train, n_test, f, dataclasses.replace(base, subset_size=n))
            return n
        except SettingsError:
            n = _round_down(n - max(1, n // 4))
    raise DataError(
        f"the data are too small for an evaluation: |D_f| = {f.size}, |D_r| = "
        f"{n_train - f.size}, |D_te| = {n_test}; subsets need at least 4 rows, and D_r and D_te "
        "at least two subsets each"
    )


def _size_reason(n: int, n_train: int, n_test: int, n_forget: int) -> str:
    """Why ``init`` chose subset size ``n``: the bound each pool sets."""
    bounds = {
        "|D_f| (targets)": n_forget,
        "|D_r|/2 (a reference and a control half)": (n_train - n_forget) // 2,
        "|D_te|/4 (null check: two subsets in the control half)": null_check_limit(n_test),
    }
    tight = min(bounds, key=lambda k: bounds[k])
    listed = ", ".join(f"{k} = {v}" for k, v in bounds.items())
    return (
        f"subset size {n}: the largest round n that fits every pool disjointly ({listed}; "
        f"the tightest is {tight}); the null check is "
        f"{'on' if n <= null_check_limit(n_test) else 'off'}"
    )


def _round_down(n: int) -> int:
    step = 100 if n >= 1000 else 50 if n >= 200 else 10 if n >= 40 else 1
    return (n // step) * step
