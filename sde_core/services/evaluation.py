"""What the evaluation pages need beyond the numbers: target inputs, caches and costs.

- :func:`target_subsets` — the evaluation's own target subsets (row indices into D_tr);
- :func:`thumbnails` — the first inputs of one target subset with a model's predictions, named
  by the dataset's class names (a denoiser's: the noisy inputs of its probe and its denoised
  images, method §14);
- :func:`layer_costs` — per layer, which models' results are already stored, whose activations
  are cached, and how many rows would have to go through which models (with an estimated time
  from :func:`measure_throughput`) before an evaluation starts;
- the cost policy: :func:`priced_layers` (costs at a throughput measured once per checkpoint),
  :func:`runs_without_asking` (ready, or at most :data:`CHEAP_SECONDS` of extraction) and
  :func:`confirmation_token` (what a user's "evaluate anyway" applies to);
- :func:`activation_cache` — the workspace's activation cache (one place spells its folder);
- :func:`session_result` / :func:`progress_note` — a (possibly partial) staged evaluation of an
  :class:`~sde_core.pipeline.evaluation.EvaluationSession` as an
  :class:`~sde_core.pipeline.evaluation.EvaluationResult`, and what it still lacks in words.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.common.hashing import file_sha256, stable_hash
from sde_core.errors import SettingsError
from sde_core.families.registry import family_of_entry
from sde_core.inputs.activation_cache import ActivationCache
from sde_core.inputs.data import DatasetBundle
from sde_core.inputs.denoisers import DENOISED, noise_layer_name, parse_noise_layer, probe_noise
from sde_core.inputs.indices import load_index_file
from sde_core.inputs.text_data import TextDataset
from sde_core.pipeline.evaluation.class_wise import (
    ForgetClasses,
    class_wise_table,
    judged_models,
)
from sde_core.pipeline.evaluation.model_evaluation import ModelEvaluation
from sde_core.pipeline.evaluation.plan import draw_subsets
from sde_core.pipeline.evaluation.session import PLAN_FIELDS
from sde_core.pipeline.evaluation.workspace_run import EvaluationResult, result_tables
from sde_core.pipeline.model_inputs import entry_activations, entry_cached_layers
from sde_core.pipeline.run_progress import duration_text
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.store import ResultsStore, workspace_store_path
from sde_core.pipeline.workspace import Workspace, cache_path
from sde_core.services.result_cache import ResultCache

__all__ = [
    "CHEAP_SECONDS",
    "LayerCost",
    "TextSamples",
    "Throughput",
    "Thumbnails",
    "activation_cache",
    "confirmation_token",
    "layer_costs",
    "measure_throughput",
    "priced_layers",
    "progress_note",
    "runs_without_asking",
    "session_result",
    "store_file_state",
    "stored_models",
    "target_subsets",
    "target_texts",
    "thumbnails",
    "thumbnails_key",
]


def activation_cache(ws: Workspace) -> ActivationCache:
    """The workspace's activation cache, the one the evaluation reads and fills."""
    return ActivationCache(cache_path(ws.root, "activations"))


def target_subsets(ws: Workspace, bundle: DatasetBundle, settings: EvalSettings) -> np.ndarray:
    """The evaluation's target subsets: int64 ``(T, n)`` row indices into D_tr.

    Drawn by the evaluation's own :func:`~sde_core.pipeline.evaluation.plan.draw_subsets` from the
    settings' seed, so they are exactly the subsets the result scored (this is the one place
    that re-derives them; an evaluation that records its subsets would replace it).
    """
    forget = load_index_file(ws.path(ws.forget_indices), len(bundle.train_labels))
    n_train, n_test = len(bundle.train_labels), len(bundle.test_labels)
    key = (n_train, n_test, stable_hash(forget.tolist()),
           *(getattr(settings, f) for f in PLAN_FIELDS))  # fmt: skip
    found = _TARGETS.get(key)
    if found is None:
        found = draw_subsets(n_train, n_test, forget, settings).targets
        found.flags.writeable = False  # shared between calls
        _TARGETS.put(key, found)
    return found


#: The last target subsets drawn (:func:`target_subsets`), by everything the draw reads: the
#: thumbnails and the per-sample table of one Explore run each asked for them (0.4 s apiece).
_TARGETS = ResultCache(max_entries=8)


@dataclass(frozen=True)
class Thumbnails:
    """The first inputs of one target subset, with a model's predictions.

    Attributes:
        target: the target subset's index. indices: ``(k,)`` rows of D_tr.
        images: uint8 ``(k, H, W)`` or ``(k, H, W, 3)`` images or, for 1-D data (``signal``),
            float ``(k, d)`` signals as the model sees them.
        captions: ``"✓ Sneaker"`` or ``"✗ Shirt (is T-shirt/top)"`` per input (a denoiser:
            ``"error 0.012"``, its denoising loss on the image).
        correct: whether each prediction is right (empty for a denoiser and a family without
            classes, whose captions give its prediction: ``"predicts 0.42"``).
        signal: whether the inputs are 1-D signals (drawn as curves) rather than images.
        noise_level: a denoiser's probe level σ_t (None for a classifier).
        noisy, denoised: a denoiser's probe inputs ``y + σ_t·ε(y)`` and its outputs, as uint8
            images like ``images`` (None for a classifier).
    """

    target: int
    indices: np.ndarray
    images: np.ndarray
    captions: list[str]
    correct: list[bool]
    signal: bool = False
    noise_level: float | None = None
    noisy: np.ndarray | None = None
    denoised: np.ndarray | None = None


@dataclass(frozen=True)
class TextSamples:
    """The first texts of one target subset (a text dataset's counterpart of thumbnails).

    Attributes:
        target: the target subset's index. indices: ``(k,)`` rows of D_tr.
        texts: the texts of those rows (target subsets are drawn from D_f).
    """

    target: int
    indices: np.ndarray
    texts: list[str]


def target_texts(
    ws: Workspace, bundle: DatasetBundle, settings: EvalSettings, target: int, count: int = 16
) -> TextSamples | None:
    """The first ``count`` texts of target subset ``target``; None when the data are not text.

    Raises:
        SettingsError: ``target`` is not a target index of these settings.
    """
    if not isinstance(bundle.train, TextDataset):
        return None
    targets = target_subsets(ws, bundle, settings)
    if not 0 <= int(target) < len(targets):
        raise SettingsError(f"target subset {target} does not exist: choose 0–{len(targets) - 1}")
    idx = targets[int(target)][:count]
    texts = bundle.texts("train", idx)
    assert texts is not None
    return TextSamples(int(target), idx, texts)


def thumbnails_key(settings: EvalSettings) -> str:
    """What :func:`thumbnails` depends on, as a hash: the settings that draw the subsets, the
    layer (a denoiser's noise level), the device and the pooling — not σ, bins or α, so a
    change of those reuses the thumbnails."""
    fields = (*PLAN_FIELDS, "layer", "device", "pool")
    return stable_hash({f: getattr(settings, f) for f in fields})


def thumbnails(
    ws: Workspace,
    bundle: DatasetBundle,
    settings: EvalSettings,
    model: str,
    target: int,
    count: int = 16,
) -> Thumbnails | None:
    """The first ``count`` inputs of target subset ``target`` with ``model``'s predictions.

    Predictions come from the model's softmax outputs (the activation cache, or one extraction
    of those rows); classes are named by ``bundle.class_names`` (their indices when the dataset
    has no names). A family without classes is captioned with the value of its
    ``prediction_layer`` (a regressor's prediction). Images come as images; 1-D inputs
    (mnist1d) as their signals.

    Returns:
        None when the inputs are neither images nor 1-D signals (e.g. precomputed activations).

    Raises:
        SettingsError: ``target`` is not a target index of these settings.
    """
    signal = not bundle.is_image and len(bundle.input_shape) == 1
    if not bundle.is_image and not signal:
        return None
    targets = target_subsets(ws, bundle, settings)
    if not 0 <= int(target) < len(targets):
        raise SettingsError(f"target subset {target} does not exist: choose 0–{len(targets) - 1}")
    idx = targets[int(target)][:count]
    if signal:
        train = bundle.split("train")
        inputs = np.stack([np.asarray(train[int(i)][0], dtype=np.float64) for i in idx])
    else:
        images = bundle.images("train", idx)
        if images is None:
            return None
        inputs = images
    entry = ws.model(model)
    level = parse_noise_layer(settings.layer)[1]
    family = family_of_entry(entry.arch, settings.layer)
    if "noisy and denoised images" in family.input_views and level is not None:
        return _denoiser_thumbnails(ws, bundle, settings, model, int(target), idx, level)
    if not family.has_class_outputs and family.prediction_layer:  # a regressor: its values
        layer = family.prediction_layer
        values = entry_activations(
            ws, entry, bundle, "train", layer, activation_cache(ws), indices=idx,
            device=settings.device, pool=settings.pool,
        )[layer]  # fmt: skip
        captions = [f"predicts {float(v[0]):.3g}" for v in np.asarray(values).reshape(len(idx), -1)]
        return Thumbnails(int(target), idx, inputs, captions, [], signal=signal)
    probs = entry_activations(
        ws, entry, bundle, "train", "output", activation_cache(ws), indices=idx,
        device=settings.device, pool=settings.pool,
    )["output"]  # fmt: skip
    names = list(bundle.class_names) or [str(c) for c in range(bundle.num_classes)]
    labels = bundle.train_labels[idx]
    captions, correct = [], []
    for p, y in zip(probs.argmax(axis=1), labels, strict=True):
        right = bool(p == y)
        correct.append(right)
        captions.append(f"✓ {names[p]}" if right else f"✗ {names[p]} (is {names[y]})")
    return Thumbnails(int(target), idx, inputs, captions, correct, signal=signal)


def _as_uint8(chw: np.ndarray, normalize: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """Model-space images ``(k, C, H, W)`` (normalised like the dataset) as uint8 ``(k, H, W)``
    (one channel) or ``(k, H, W, C)``."""
    x = np.asarray(chw, dtype=np.float64)
    if normalize is not None:
        mean, std = (np.asarray(v, dtype=np.float64).reshape(1, -1, 1, 1) for v in normalize)
        x = x * std + mean
    out = np.clip(np.rint(x * 255.0), 0, 255).astype(np.uint8).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(out[..., 0] if out.shape[-1] == 1 else out)


def _denoiser_thumbnails(
    ws: Workspace,
    bundle: DatasetBundle,
    settings: EvalSettings,
    model: str,
    target: int,
    idx: np.ndarray,
    level: float,
) -> Thumbnails:
    """A denoiser's thumbnails: clean images, the probe's noisy inputs and the denoised images at
    noise level ``level`` (method §14), with each image's denoising loss."""
    import torch

    dataset = bundle.split("train")
    clean = torch.stack([torch.as_tensor(dataset[int(i)][0]) for i in idx]).float()
    noisy = clean + level * probe_noise(clean)
    layer = noise_layer_name(DENOISED, level)
    flat = entry_activations(
        ws, ws.model(model), bundle, "train", layer, activation_cache(ws), indices=idx,
        device=settings.device, pool=settings.pool,
    )[layer]  # fmt: skip
    denoised = flat.reshape(clean.shape)
    errors = ((denoised - clean.numpy()) ** 2).reshape(len(idx), -1).mean(axis=1)
    normalize = getattr(dataset, "normalize", None)
    images = bundle.images("train", idx)
    assert images is not None  # is_image
    return Thumbnails(
        target, idx, images, [f"error {e:.3g}" for e in errors], [], noise_level=level,
        noisy=_as_uint8(noisy.numpy(), normalize), denoised=_as_uint8(denoised, normalize),
    )  # fmt: skip


#: :func:`stored_models`' answers by the store files' state (a page rerun asks again; reading
#: the keys verifies every unit, ~0.06 s a model): bounded, dropped when a file changes.
_STORED: dict[tuple[Any, ...], set[str]] = {}


def store_file_state(path: Path) -> tuple[tuple[int, int], ...]:
    """(size, mtime) of the store and of its write-ahead log (a write changes one of them); a
    missing or empty log is ``(-1, -1)``, as a reader may create an empty one on opening."""
    out = []
    for file in (path, Path(f"{path}-wal")):
        try:
            info = file.stat()
        except OSError:
            out.append((-1, -1))
        else:
            empty_log = file.name.endswith("-wal") and not info.st_size
            out.append((-1, -1) if empty_log else (info.st_size, info.st_mtime_ns))
    return tuple(out)


def stored_models(ws: Workspace, workspace_hash: str, settings: EvalSettings) -> set[str]:
    """Models whose results for ``settings`` are in the workspace's results store (kept in
    memory while the store's files are unchanged)."""
    path = workspace_store_path(ws.root)
    if not path.is_file():
        return set()
    wanted = stable_hash(settings.result_key())
    key = (str(path.resolve()), store_file_state(path), workspace_hash, wanted)
    if key in _STORED:
        return set(_STORED[key])
    with ResultsStore(path) as store:
        runs = store.list_runs(workspace_hash)
        found = runs[runs["settings_hash"] == wanted]
        done = set() if found.empty else store.finished_units(int(found["id"].iloc[0]),
                                                               arrays=False)  # fmt: skip
    if len(_STORED) >= 64:
        _STORED.clear()
    _STORED[key] = set(done)
    return done


@dataclass(frozen=True)
class Throughput:
    """A measured extraction speed: ``rows`` pushed through a model in ``seconds`` (model
    loading included, so the estimate it gives is on the slow side)."""

    rows: int
    seconds: float

    @property
    def rows_per_second(self) -> float:
        """Rows per second."""
        return self.rows / max(self.seconds, 1e-9)


def measure_throughput(
    ws: Workspace, bundle: DatasetBundle, model: str, settings: EvalSettings, rows: int = 256
) -> Throughput:
    """Time one extraction of ``rows`` training rows through ``model`` (nothing is cached)."""
    entry = ws.model(model)
    idx = np.arange(min(rows, len(bundle.train_labels)))
    t0 = time.perf_counter()
    entry_activations(
        ws, entry, bundle, "train", "output", None, indices=idx, device=settings.device,
        pool=settings.pool,
    )  # fmt: skip
    return Throughput(int(idx.size), time.perf_counter() - t0)


@dataclass(frozen=True)
class LayerCost:
    """What evaluating every model at one layer would take.

    Attributes:
        layer: the layer.
        stored: models whose results are in the results store (read back at once).
        cached: models whose activations are cached (statistics only).
        extract: models that need an extraction first.
        rows: rows to push through those models (training and test rows of each split that is
            not cached).
        seconds: estimated extraction time at the measured throughput (None when unknown).
    """

    layer: str
    stored: list[str]
    cached: list[str]
    extract: list[str]
    rows: int
    seconds: float | None

    @property
    def ready(self) -> bool:
        """Whether nothing has to be extracted."""
        return not self.extract

    def describe(self) -> str:
        """One sentence: what is ready and what an evaluation would cost."""
        ready = f"{len(self.stored)} stored, {len(self.cached)} cached"
        if self.ready:
            return f"{self.layer}: ready ({ready})"
        cost = f"extract {len(self.extract)} models × {self.rows // len(self.extract):,} rows"
        when = "" if self.seconds is None else f", about {duration_text(self.seconds)}"
        return f"{self.layer}: {cost}{when} before the statistics ({ready})"


def _missing_rows(
    ws: Workspace,
    model: str,
    bundle: DatasetBundle,
    cache: ActivationCache,
    layers: Sequence[str],
    settings: EvalSettings,
) -> int:
    """Rows of every split where some of ``layers`` is not cached for ``model``."""
    entry = ws.model(model)
    need = set(layers)
    total = 0
    for split in ("train", "test"):
        found = entry_cached_layers(ws, entry, bundle, split, sorted(need), cache, settings.pool)
        if need - found:
            total += len(bundle.labels(split))
    return total


def layer_costs(
    ws: Workspace,
    bundle: DatasetBundle,
    settings: EvalSettings,
    layers: Sequence[str],
    workspace_hash: str,
    *,
    models: Sequence[str] | None = None,
    throughput: Mapping[str, Throughput] | None = None,
) -> list[LayerCost]:
    """Per layer, which models are stored, cached or need an extraction, and its cost.

    An evaluation at layer ``L`` needs the activations of ``L`` and of ``output`` (the classic
    metrics) on both splits; one extraction pass computes every missing layer of a split.

    Args:
        ws, bundle: the workspace and its dataset.
        settings: the evaluation settings (their layer is replaced by each of ``layers``).
        layers: the layers to cost.
        workspace_hash: the workspace's content hash (the results store's key).
        models: the models (default: all).
        throughput: measured speed per architecture (:func:`measure_throughput`); models whose
            architecture is missing get no time estimate.
    """
    names = list(models) if models is not None else [m.name for m in ws.models]
    cache = activation_cache(ws)
    out = []
    for layer in layers:
        at_layer = settings.with_overrides(layer=layer)
        stored = stored_models(ws, workspace_hash, at_layer)
        cached, extract, rows, seconds = [], [], 0, 0.0
        known = True
        for name in names:
            if name in stored:
                continue
            if bundle.precomputed is not None:
                cached.append(name)
                continue
            entry = ws.model(name)
            missing_rows = _missing_rows(ws, name, bundle, cache, [layer, "output"], settings)
            if not missing_rows:
                cached.append(name)
                continue
            extract.append(name)
            rows += missing_rows
            speed = (throughput or {}).get(entry.arch)
            if speed is None:
                known = False
            else:
                seconds += missing_rows / speed.rows_per_second
        ordered = [n for n in names if n in stored]
        out.append(LayerCost(layer, ordered, cached, extract, rows, seconds if known else None))
    return out


#: A layer whose extraction is estimated at most this many seconds is evaluated without asking.
CHEAP_SECONDS = 20.0


def _measured_throughputs(
    ws: Workspace,
    bundle: DatasetBundle,
    settings: EvalSettings,
    costs: Sequence[LayerCost],
    cache: ResultCache,
    measuring: Callable[[str], AbstractContextManager[object]],
) -> dict[str, Throughput]:
    """Extraction speed per architecture of the models that need an extraction, measured once
    per (checkpoint, architecture, device) and kept in ``cache``."""
    speeds: dict[str, Throughput] = {}
    for name in dict.fromkeys(n for c in costs for n in c.extract):
        entry = ws.model(name)
        if entry.arch in speeds:
            continue
        key = ("throughput", file_sha256(ws.path(entry.checkpoint)), entry.arch, settings.device)
        speed = cache.get(key)
        if speed is None:
            with measuring(name):
                speed = measure_throughput(ws, bundle, name, settings)
            cache.put(key, speed)
        speeds[entry.arch] = speed
    return speeds


def priced_layers(
    ws: Workspace,
    bundle: DatasetBundle,
    settings: EvalSettings,
    layers: Sequence[str],
    workspace_hash: str,
    cache: ResultCache,
    measuring: Callable[[str], AbstractContextManager[object]] = lambda name: nullcontext(),
) -> list[LayerCost]:
    """:func:`layer_costs` of ``layers``, with an estimated time when something must be
    extracted: each architecture's throughput is measured once (256 rows through one of its
    models, inside ``measuring(model)``, e.g. a spinner) and kept in ``cache``."""
    costs = layer_costs(ws, bundle, settings, layers, workspace_hash)
    if all(c.ready for c in costs):
        return costs
    speeds = _measured_throughputs(ws, bundle, settings, costs, cache, measuring)
    return layer_costs(ws, bundle, settings, layers, workspace_hash, throughput=speeds)


def runs_without_asking(cost: LayerCost) -> bool:
    """Whether a layer is evaluated at once: nothing to extract, or an extraction estimated at
    most :data:`CHEAP_SECONDS` at the measured throughput."""
    return cost.ready or (cost.seconds is not None and cost.seconds <= CHEAP_SECONDS)


def confirmation_token(workspace_hash: str, settings: EvalSettings, layer: str) -> tuple[str, str]:
    """What a user's "evaluate this layer anyway" applies to: the workspace's content and the
    settings at ``layer``."""
    return (workspace_hash, stable_hash(settings.with_overrides(layer=layer).result_key()))


def session_result(
    workspace_hash: str,
    settings: EvalSettings,
    evaluations: Sequence[ModelEvaluation],
    classes: ForgetClasses | None = None,
) -> EvaluationResult:
    """An :class:`EvaluationResult` of (possibly partial) model evaluations, for display.

    Args:
        workspace_hash: the workspace's content hash (the session's ``workspace_hash``).
        settings: the settings evaluated.
        evaluations: one :class:`ModelEvaluation` per model, finished or partial (a partial one
            has NaN where a stage has not run and covers ``model.draws`` draws).
        classes: the dataset's labels and forget set (the session's ``classes``) for the
            class-wise step (:func:`~sde_core.pipeline.evaluation.class_wise.judged_models`);
            None: the class-mix reason the finished evaluations recorded.
    """
    models, subsets, draws = result_tables(list(evaluations))
    models = judged_models(models, class_wise_table(list(evaluations)), classes)
    arrays = {f"{ev.model.name}/{k}": v for ev in evaluations for k, v in ev.arrays.items()}
    return EvaluationResult(
        settings=settings, workspace_hash=workspace_hash, models=models, subsets=subsets,
        arrays=arrays, draws=draws,
    )  # fmt: skip


#: What each stage adds, in words (for :func:`progress_note`).
_STAGE_WORDS = {
    "panels": "the calibrated panels",
    "controls": "the controlled F1",
    "null": "the null check",
    "classic": "the accuracies and the membership attack",
}


def progress_note(
    evaluation: ModelEvaluation, settings: EvalSettings, stages: Sequence[str]
) -> str:
    """What a stopped (partial) evaluation covers, in one sentence ("" when it is complete).

    Args:
        evaluation: the model's partial :class:`ModelEvaluation`.
        settings: the settings (``draws`` = B planned).
        stages: the stages that were requested.

    Returns:
        e.g. ``"original: stopped after 2 of 5 draws; the controlled F1 and the null check
        have not run. Intervals and the gate use the finished draws only."``
    """
    if evaluation.complete:
        return ""
    m = evaluation.model
    done = int(m.draws)
    planned = int(settings.draws)
    missing = []
    if "controls" in stages and not np.isfinite(m.f1.raw):
        missing.append(_STAGE_WORDS["controls"])
    if "null" in stages and int(m.null_pairs) == 0:
        missing.append(_STAGE_WORDS["null"])
    if "classic" in stages and not np.isfinite(m.acc_r.value):
        missing.append(_STAGE_WORDS["classic"])
    text = f"{m.name}: stopped after {done} of {planned} draws"
    if missing:
        verb = "has" if len(missing) == 1 else "have"
        text += f"; {', '.join(missing[:-1])}{' and ' if len(missing) > 1 else ''}{missing[-1]}"
        text += f" {verb} not run"
    return text + ". Intervals and the gate use the finished draws only; Resume continues."
