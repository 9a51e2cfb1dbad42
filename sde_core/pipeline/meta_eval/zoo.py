"""The checkpoint zoo of a meta-evaluation (method §17): originals and retrained models from
several seeds, the unlearning methods at graded strengths, runs too weak to change D_f, and
"knowledge returns" checkpoints (relearning on a small part of D_f; int8 and 4-bit weights).

:func:`zoo_units` lists the checkpoints a plan asks for, parents first; :func:`build_zoo`
computes the missing ones. Each checkpoint is cached on its own in ``<work>/zoo/<name>/``
(``record.json``, ``probs.npz`` — its softmax outputs on D_tr and D_te — and, for a float
model, ``state.safetensors``), so an interrupted build resumes at the first missing checkpoint
and a finished one costs nothing. Progress is reported with an ETA after every checkpoint.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.common.fsio import atomic_write, atomic_write_json
from sde_core.common.hashing import stable_hash
from sde_core.errors import PlanError
from sde_core.pipeline.meta_eval.spec import MetaPlan, ZooData

__all__ = [
    "KINDS",
    "RUN_SEED_OFFSET",
    "ZooCheckpoint",
    "ZooProgress",
    "build_zoo",
    "checkpoint_probs",
    "load_zoo",
    "quantise_model",
    "zoo_layer",
    "zoo_probs",
    "zoo_units",
]

#: Checkpoint kinds: the ensembles, the reference row's retrained model, the graded unlearning
#: runs, the too-weak runs, and the knowledge-returns runs.
KINDS = ("original", "retrained", "reference", "unlearned", "weak", "relearned", "quantised")
#: ``progress(label, done, total, eta_seconds)``; eta is None before the first timed unit.
ZooProgress = Callable[[str, int, int, float | None], None]
#: Relative cost of each kind (for the ETA before any unit of that kind was timed).
_COST = {
    "original": 1.0,
    "retrained": 0.8,
    "reference": 0.8,
    "unlearned": 0.05,
    "weak": 0.01,
    "relearned": 0.01,
    "quantised": 0.005,
}


@dataclass(frozen=True)
class ZooCheckpoint:
    """One checkpoint of the zoo.

    Attributes:
        name: unique name (``original-s0``, ``ft-s0-3``, ``relearn-ga-s1``…). kind: one of
            :data:`KINDS`. method: the unlearning method ("" for trained models; ``int8`` /
            ``int4`` for a quantised one). strength: 1-based strength among the method's runs
            (0 when not graded). base: the original seed it descends from (the model's own seed
            for trained models). parent: the checkpoint it was made from ("" when trained).
        params: the method's parameter overrides. seconds: time to make it (filled when built).
    """

    name: str
    kind: str
    method: str = ""
    strength: int = 0
    base: int = 0
    parent: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    seconds: float = float("nan")

    def key(self, plan: MetaPlan) -> str:
        """Content key: what determines the checkpoint (the plan's recipe and data)."""
        return stable_hash(
            {
                "unit": {k: v for k, v in asdict(self).items() if k != "seconds"},
                "arch": plan.arch,
                "kwargs": plan.arch_kwargs,
                "train": plan.train,
                "relearn": plan.relearn,
                "data": str(plan.data_folder),
            }
        )


#: An unlearning run from base b is seeded with RUN_SEED_OFFSET + b: runs from different bases
#: are independent, and no run shares a seed with the shipped plan's ensembles (seeds below 1000):
#: EU-k with k = every layer is a retraining, which must not repeat a retrained model.
RUN_SEED_OFFSET = 1000


def zoo_units(plan: MetaPlan) -> list[ZooCheckpoint]:
    """Every checkpoint the plan asks for, each after its parent."""
    units = [ZooCheckpoint(f"original-s{s}", "original", base=s) for s in plan.original_seeds]
    units += [ZooCheckpoint(f"retrained-s{s}", "retrained", base=s) for s in plan.retrained_seeds]
    units.append(ZooCheckpoint("reference", "reference", base=plan.reference_seed))
    for b in plan.bases:
        parent = f"original-s{b}"
        seed = {"seed": RUN_SEED_OFFSET + b}  # a run's own seed, unless the plan gives one
        for method, runs in plan.methods.items():
            for i, params in enumerate(runs, start=1):
                units.append(
                    ZooCheckpoint(
                        f"{method}-s{b}-{i}", "unlearned", method, i, b, parent, {**seed, **params}
                    )
                )
        for method, params in plan.weak.items():
            units.append(
                ZooCheckpoint(
                    f"weak-{method}-s{b}", "weak", method, 0, b, parent, {**seed, **params}
                )
            )
        for method, runs in plan.methods.items():
            strongest = f"{method}-s{b}-{len(runs)}"
            units.append(
                ZooCheckpoint(f"relearn-{method}-s{b}", "relearned", "ft", 0, b, strongest)
            )
            for q in plan.quantise:
                units.append(ZooCheckpoint(f"{q}-{method}-s{b}", "quantised", q, 0, b, strongest))
    return units


def quantise_model(model: Any, how: str) -> Any:
    """A quantised copy of ``model``: ``"int8"`` is torch's dynamic quantisation of every
    ``nn.Linear`` (int8 weights, activations quantised on the fly); ``"int4"`` rounds each
    Linear weight row to 16 symmetric levels (scale = max |w| / 7; torch has no 4-bit Linear,
    so the weights stay float tensors holding 4-bit values)."""
    import torch
    from torch import nn

    if how == "int8":
        import warnings

        from torch.ao.quantization import quantize_dynamic

        with warnings.catch_warnings():  # torch 2.9+ deprecates torch.ao for torchao
            warnings.simplefilter("ignore", (DeprecationWarning, UserWarning))
            return quantize_dynamic(copy.deepcopy(model).eval(), {nn.Linear}, dtype=torch.qint8)
    if how != "int4":
        raise PlanError(f"unknown quantisation {how!r}; use int8 or int4")
    out = copy.deepcopy(model).eval()
    with torch.no_grad():
        for module in out.modules():
            if isinstance(module, nn.Linear):
                w = module.weight
                scale = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 7.0
                w.copy_(torch.clamp(torch.round(w / scale), -8, 7) * scale)
    return out


def checkpoint_probs(model: Any, dataset: Any, batch: int = 2048) -> np.ndarray:
    """Softmax outputs ``(N, C)`` float64 of ``model`` (eval mode, CPU) on every row of
    ``dataset`` (an :class:`~sde_core.inputs.array_datasets.ArrayDataset`:
    :meth:`ZooData.dataset`)."""
    import torch

    model.eval()
    parts = []
    with torch.no_grad():
        for i in range(0, len(dataset), batch):
            x, _ = dataset.get_batch(np.arange(i, min(i + batch, len(dataset))))
            parts.append(torch.softmax(model(x).double(), dim=1).numpy())
    return np.concatenate(parts).astype(np.float64)


class _Builder:
    """Makes one checkpoint at a time (parents read back from the cache)."""

    def __init__(self, plan: MetaPlan, data: ZooData, folder: Path) -> None:
        from sde_core.learning.training import TrainConfig

        self.plan, self.data, self.folder = plan, data, folder
        self.train_set = data.dataset("train")
        self.retain_set = data.dataset("train", data.retain)
        try:
            self.config = TrainConfig(**plan.train)
        except (TypeError, ValueError) as exc:
            raise PlanError(f"{plan.name} train: {exc}") from None
        self._models: dict[str, Any] = {}

    def fresh(self, seed: int) -> Any:
        import torch

        from sde_core.inputs.architectures import build_model

        torch.manual_seed(seed)
        return build_model(self.plan.arch, **self.plan.arch_kwargs)

    def model(self, name: str) -> Any:
        """A cached float checkpoint's model."""
        if name not in self._models:
            from safetensors.torch import load_file

            model = self.fresh(0)
            model.load_state_dict(load_file(str(self.folder / name / "state.safetensors")))
            self._models[name] = model.eval()
        return self._models[name]

    def make(self, unit: ZooCheckpoint) -> Any:
        from dataclasses import replace

        from sde_core.learning.training import train
        from sde_core.learning.unlearning import UnlearnData, unlearn

        if unit.kind in ("original", "retrained", "reference"):
            rows = self.train_set if unit.kind == "original" else self.retain_set
            model = self.fresh(unit.base)
            return train(model, rows, replace(self.config, seed=unit.base)).model
        parent = self.model(unit.parent)
        if unit.kind == "quantised":
            return quantise_model(parent, unit.method)
        if unit.kind == "relearned":
            rng = np.random.default_rng(self.plan.meta_seed)
            order = rng.permutation(self.data.forget)
            k = max(1, round(self.plan.relearn["fraction"] * order.size))
            part = UnlearnData(
                train=self.train_set,
                forget_idx=order[k:],
                retain_idx=order[:k],
                num_classes=self._classes(),
            )
            params = {key: v for key, v in self.plan.relearn.items() if key != "fraction"}
            return unlearn("ft", parent, part, **params).model  # FT on a part of D_f
        split = UnlearnData.from_forget(
            self.train_set,
            self.data.forget,
            num_classes=self._classes(),
            train_config=self.config,
            model_factory=lambda: self.fresh(unit.base),
        )
        return unlearn(unit.method, parent, split, **unit.params).model

    def _classes(self) -> int:
        return int(max(self.data.y_train.max(), self.data.y_test.max()) + 1)


def _done(folder: Path, unit: ZooCheckpoint, plan: MetaPlan) -> bool:
    record = folder / unit.name / "record.json"
    if not record.is_file() or not (folder / unit.name / "probs.npz").is_file():
        return False
    try:
        return bool(json.loads(record.read_text())["key"] == unit.key(plan))
    except (ValueError, KeyError, OSError):
        return False


def _save(folder: Path, unit: ZooCheckpoint, plan: MetaPlan, model: Any, data: ZooData) -> None:
    from safetensors.torch import save_file

    out = folder / unit.name
    out.mkdir(parents=True, exist_ok=True)
    if unit.kind != "quantised":
        state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
        atomic_write(out / "state.safetensors", lambda p: save_file(state, str(p)))
    train_p = checkpoint_probs(model, data.dataset("train"))
    test_p = checkpoint_probs(model, data.dataset("test"))
    arrays = {"train": train_p.astype(np.float32), "test": test_p.astype(np.float32)}
    atomic_write(out / "probs.npz", lambda p: _write_npz(p, arrays))
    atomic_write_json(out / "record.json", {"key": unit.key(plan), **asdict(unit)})


def _write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)  # type: ignore[arg-type]


def build_zoo(
    plan: MetaPlan,
    work: str | Path,
    progress: ZooProgress | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> list[ZooCheckpoint]:
    """Build every missing checkpoint of the plan's zoo into ``<work>/zoo`` and return the
    zoo's records (with their times).

    Args:
        plan: the plan. work: the work folder (the cache). progress: called after each
            checkpoint with its label, the checkpoints done, the total and the ETA in seconds.
        cancelled: checked before each checkpoint; True stops the build (a rerun resumes).

    Raises:
        PlanError: a bad recipe or method parameter (the message names it).
    """
    import torch

    from sde_core.errors import TrainingError

    folder = Path(work) / "zoo"
    folder.mkdir(parents=True, exist_ok=True)
    data = plan.load_data()
    units = zoo_units(plan)
    builder: _Builder | None = None
    spent: dict[str, list[float]] = {}
    for i, unit in enumerate(units):
        if _done(folder, unit, plan):
            continue
        if cancelled is not None and cancelled():
            break
        builder = builder or _Builder(plan, data, folder)
        t0 = time.perf_counter()
        try:
            with torch.random.fork_rng():
                model = builder.make(unit)
        except TrainingError as exc:
            raise PlanError(f"zoo checkpoint {unit.name}: {exc}") from None
        seconds = time.perf_counter() - t0
        spent.setdefault(unit.kind, []).append(seconds)
        timed = ZooCheckpoint(**{**asdict(unit), "seconds": round(seconds, 3)})
        _save(folder, timed, plan, model, data)
        if progress is not None:
            left = [u for u in units[i + 1 :] if not _done(folder, u, plan)]
            progress(unit.name, len(units) - len(left), len(units), _eta(left, spent))
    return load_zoo(plan, work)


def _eta(left: list[ZooCheckpoint], spent: dict[str, list[float]]) -> float | None:
    if not spent:
        return None
    per_cost = np.mean([np.mean(v) / _COST[k] for k, v in spent.items()])
    return float(
        sum(np.mean(spent[u.kind]) if u.kind in spent else per_cost * _COST[u.kind] for u in left)
    )


def load_zoo(plan: MetaPlan, work: str | Path) -> list[ZooCheckpoint]:
    """The records of the zoo's built checkpoints (in :func:`zoo_units` order; a checkpoint not
    built yet is left out)."""
    folder = Path(work) / "zoo"
    out = []
    for unit in zoo_units(plan):
        if _done(folder, unit, plan):
            record = json.loads((folder / unit.name / "record.json").read_text())
            record.pop("key")
            out.append(ZooCheckpoint(**record))
    return out


def zoo_layer(
    plan: MetaPlan, work: str | Path, unit: ZooCheckpoint, layer: str, data: ZooData
) -> tuple[np.ndarray, np.ndarray]:
    """A built checkpoint's activations at ``layer`` on D_tr and D_te (float64), computed from
    its weights (a quantised checkpoint: its parent's, quantised again — the quantisation is
    deterministic) and cached beside its outputs (``layer-<name>.npz``); ``data``: the plan's
    (:meth:`MetaPlan.load_data`, read once by the caller)."""
    from sde_core.inputs.extraction import extract_activations

    folder = Path(work) / "zoo"
    path = folder / unit.name / f"layer-{stable_hash(layer)[:12]}.npz"
    if path.is_file():
        with np.load(path) as d:
            if str(d["layer"]) == layer:
                return d["train"].astype(np.float64), d["test"].astype(np.float64)
    builder = _Builder(plan, data, folder)
    if unit.kind == "quantised":
        model = quantise_model(builder.model(unit.parent), unit.method)
    else:
        model = builder.model(unit.name)
    acts = {
        part: extract_activations(model, data.dataset(part), layer)[layer]
        for part in ("train", "test")
    }
    arrays = {**{k: v.astype(np.float32) for k, v in acts.items()}, "layer": np.array(layer)}
    atomic_write(path, lambda p: _write_npz(p, arrays))
    return acts["train"].astype(np.float64), acts["test"].astype(np.float64)


def zoo_probs(work: str | Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    """A built checkpoint's softmax outputs on D_tr and D_te (float64)."""
    with np.load(Path(work) / "zoo" / name / "probs.npz") as d:
        return d["train"].astype(np.float64), d["test"].astype(np.float64)
