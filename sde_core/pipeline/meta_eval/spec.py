"""A meta-evaluation plan (method §17): the zoo to build, the evaluation settings and the
bootstrap, read from a TOML file (the shipped ones live in ``meta_eval/plans/``).

:func:`load_meta_plan` takes a shipped plan's name (``mnist1d``) or a path, checks every field
and returns a :class:`MetaPlan`; a bad field raises :class:`~sde_core.errors.PlanError` naming
it and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.common.toml_limits import read_toml
from sde_core.errors import PlanError, SettingsError
from sde_core.pipeline.settings import PRECISION_FIELDS, EvalSettings

__all__ = [
    "META_PLAN_DIR",
    "QUANTISATIONS",
    "ZOO_METHODS",
    "MetaPlan",
    "ZooData",
    "load_meta_plan",
    "meta_plan_names",
]

#: Where the shipped meta-evaluation plans live.
META_PLAN_DIR = Path(__file__).resolve().parent / "plans"
#: The unlearning methods a zoo may use (method §7's classifier methods with a strength knob;
#: EU-k's is k, the number of last layers re-learnt).
ZOO_METHODS = ("ft", "ga", "neggrad_plus", "rl", "salun", "l1_sparse", "eu_k")
#: The quantisations of the "knowledge returns" checkpoints: torch's dynamic int8 quantisation
#: of the Linear layers, and 4-bit per-output-channel weights (torch has no 4-bit Linear).
QUANTISATIONS = ("int8", "int4")
_EVAL_FIELDS = (
    "subset_size",
    "targets",
    "splits",
    "draws",
    "panel_size",
    "null_pairs",
    "baseline_targets",
    "seed",
)


@dataclass(frozen=True)
class ZooData:
    """The data of a zoo: D_tr (``x_train``, ``y_train``), D_te and the forget rows of D_tr.

    ``is_image``: the inputs are uint8 images ``(N, H, W[, C])``, read as a workspace's npz
    dataset reads them (scaled to [0, 1], channels first); otherwise float feature rows."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    forget: np.ndarray
    is_image: bool = False

    @property
    def retain(self) -> np.ndarray:
        """D_r = D_tr without D_f (row indices)."""
        return np.setdiff1d(np.arange(len(self.x_train), dtype=np.int64), self.forget)

    def dataset(self, split: str, rows: np.ndarray | None = None) -> Any:
        """D_tr (``split`` "train") or D_te ("test"), or their ``rows``, as the
        :class:`~sde_core.inputs.array_datasets.ArrayDataset` training and extraction read."""
        from sde_core.inputs.array_datasets import ArrayDataset

        x, y = (self.x_train, self.y_train) if split == "train" else (self.x_test, self.y_test)
        if rows is not None:
            x, y = x[rows], y[rows]
        return ArrayDataset(x, y, self.is_image)


@dataclass(frozen=True)
class MetaPlan:
    """A checked meta-evaluation plan.

    Attributes:
        name, title, path: the plan. data_folder: a folder with ``data.npz`` (``x_train``,
            ``y_train``, ``x_test``, ``y_test``) and ``forget.npy``.
        arch, arch_kwargs: the architecture of every checkpoint. train: its training recipe
            (:class:`~sde_core.learning.training.TrainConfig` fields).
        original_seeds, retrained_seeds: the ensembles; reference_seed: the extra retrained
            model of the retrain-based reference row; bases: the original seeds the methods
            start from.
        methods: method -> its strengths (parameter overrides, weakest first). weak: method ->
            one run too weak to change D_f. relearn: the relearning run's fields (``fraction``
            of D_f, and FT parameters). quantise: quantisations of :data:`QUANTISATIONS`.
        settings: the SDE evaluation settings of the first pass (a fixed design).
        default_settings: the second pass's (method §17): the same, in the library's default
            design — the precision target and the sized null check (``[eval.default_design]``
            may override its fields, e.g. a smaller ``null_size`` in a test).
        layers: more layers the first pass's design evaluates (``[eval] layers``, e.g.
            ``["penultimate"]``; the first pass itself reads ``settings.layer``, ``output``).
        bootstrap, meta_seed: bootstrap resamples over checkpoints and their seed.
        scores_folder: the work folder's sub-folder of cached scores (``scores``; another
            evaluation seed keeps its own, :meth:`with_eval_seed`).
    """

    name: str
    title: str
    path: Path
    data_folder: Path
    arch: str
    arch_kwargs: dict[str, Any]
    train: dict[str, Any]
    original_seeds: tuple[int, ...]
    retrained_seeds: tuple[int, ...]
    reference_seed: int
    bases: tuple[int, ...]
    methods: dict[str, tuple[dict[str, Any], ...]]
    weak: dict[str, dict[str, Any]]
    relearn: dict[str, Any]
    quantise: tuple[str, ...]
    settings: EvalSettings
    default_settings: EvalSettings
    layers: tuple[str, ...] = ()
    bootstrap: int = 2000
    meta_seed: int = 0
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    scores_folder: str = "scores"

    def with_eval_seed(self, seed: int) -> MetaPlan:
        """The same zoo evaluated with another seed (subsets, splits, draws of both passes and
        the other layers): named ``<name>-seed<seed>``, its scores cached in
        ``scores-seed<seed>``; the zoo and its cache keys are unchanged, so it is reused. A
        held-out evaluation seed shows how much the tables move with the evaluation's own
        randomness, which the bootstrap over checkpoints does not include.

        Raises:
            PlanError: a seed the settings refuse (:class:`EvalSettings`' own check and bound).
        """
        try:
            settings = replace(self.settings, seed=seed)
        except SettingsError as exc:
            raise PlanError(f"the evaluation seed: {exc}") from None
        return replace(
            self,
            name=f"{self.name}-seed{seed}",
            title=f"{self.title}, evaluation seed {seed}",
            settings=settings,
            default_settings=replace(self.default_settings, seed=seed),
            scores_folder=f"scores-seed{seed}",
        )

    def load_data(self) -> ZooData:
        """D_tr, D_te and D_f from :attr:`data_folder`.

        Raises:
            PlanError: a missing file or array, or forget rows outside D_tr.
        """
        npz, forget = self.data_folder / "data.npz", self.data_folder / "forget.npy"
        for f in (npz, forget):
            if not f.is_file():
                raise PlanError(f"{self.name}: {f} is missing; build the demo or fix data_folder")
        with np.load(npz, allow_pickle=False) as d:
            missing = {"x_train", "y_train", "x_test", "y_test"} - set(d.files)
            if missing:
                raise PlanError(f"{npz} lacks the arrays {sorted(missing)}")
            arrays = {k: np.asarray(d[k]) for k in ("x_train", "y_train", "x_test", "y_test")}
        rows = np.unique(np.load(forget, allow_pickle=False).astype(np.int64))
        if rows.size == 0 or rows.min() < 0 or rows.max() >= len(arrays["x_train"]):
            raise PlanError(f"{forget} must hold rows of D_tr (0 … {len(arrays['x_train']) - 1})")
        from sde_core.inputs.data import is_image_array

        image = all(is_image_array(arrays[k]) for k in ("x_train", "x_test"))
        return ZooData(
            x_train=arrays["x_train"] if image else arrays["x_train"].astype(np.float32),
            y_train=arrays["y_train"].astype(np.int64),
            x_test=arrays["x_test"] if image else arrays["x_test"].astype(np.float32),
            y_test=arrays["y_test"].astype(np.int64),
            forget=rows,
            is_image=image,
        )


def meta_plan_names() -> list[str]:
    """The shipped plans' names."""
    return sorted(p.stem for p in META_PLAN_DIR.glob("*.toml"))


def _ints(raw: Mapping[str, Any], key: str, where: str, minimum: int = 1) -> tuple[int, ...]:
    value = raw.get(key)
    if (
        not isinstance(value, list)
        or len(value) < minimum
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
    ):
        raise PlanError(
            f"{where}.{key} must be a list of at least {minimum} non-negative integer seeds"
        )
    return tuple(value)


def _table(raw: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise PlanError(f"{where}.{key} must be a table")
    return dict(value)


def _methods(zoo: Mapping[str, Any]) -> dict[str, tuple[dict[str, Any], ...]]:
    out: dict[str, tuple[dict[str, Any], ...]] = {}
    for method, runs in _table(zoo, "methods", "zoo").items():
        if method not in ZOO_METHODS:
            raise PlanError(f"zoo.methods.{method}: unknown method; use one of {ZOO_METHODS}")
        if not isinstance(runs, list) or not runs or not all(isinstance(r, dict) for r in runs):
            raise PlanError(f"zoo.methods.{method} must be a list of parameter tables")
        out[method] = tuple(dict(r) for r in runs)
    return out


def _settings(ev: Mapping[str, Any]) -> tuple[EvalSettings, EvalSettings]:
    if "sized_null_pairs" in ev:
        raise PlanError(
            "eval.sized_null_pairs is no longer read: the zoo's second pass runs the library's "
            "default design, whose null check is sized by null_size (method §17); remove it, "
            "or set [eval.default_design] null_size"
        )
    unknown = sorted(set(ev) - set(_EVAL_FIELDS) - {"default_design", "layers"})
    if unknown:
        raise PlanError(f"eval: unknown field(s) {unknown}; use {list(_EVAL_FIELDS)}")
    given = {k: ev[k] for k in _EVAL_FIELDS if k in ev}
    design = _table(ev, "default_design", "eval")
    bad = sorted(set(design) - set(PRECISION_FIELDS))
    if bad:
        raise PlanError(
            f"eval.default_design: unknown field(s) {bad}; use {list(PRECISION_FIELDS)}"
        )
    library = EvalSettings()
    try:
        settings = EvalSettings(**given, precision=0.0)
        defaults = replace(settings, **{f: getattr(library, f) for f in PRECISION_FIELDS} | design)
    except (TypeError, ValueError) as exc:
        raise PlanError(f"eval: {exc}") from None
    if not defaults.precision:
        raise PlanError("eval.default_design.precision must be > 0 (the default design's W)")
    return settings, defaults


def _check_layers(path: Path, arch: str, kwargs: dict[str, Any], layers: list[str]) -> None:
    """Refuse at load what the layer pass would refuse an hour later: an unknown architecture,
    bad kwargs or a layer name the model does not have. The model is built on the meta device
    (no weights, no forward pass). A ``file:`` class is not imported here: its code runs only in
    the zoo's build, under the opt-in that build asks for."""
    import torch

    from sde_core.errors import SDEError
    from sde_core.inputs.architectures import build_model
    from sde_core.inputs.external_archs import is_file_arch
    from sde_core.inputs.layers import resolve_layer

    if is_file_arch(arch):
        return
    try:
        with torch.device("meta"):
            model = build_model(arch, **kwargs)
    except SDEError as exc:
        raise PlanError(f"{path.name} model: {exc}") from None
    for layer in layers:
        try:
            resolve_layer(model, layer)
        except SDEError as exc:
            raise PlanError(f"{path.name} eval.layers: {exc}") from None


def load_meta_plan(name_or_path: str | Path, data_folder: str | Path | None = None) -> MetaPlan:
    """Read and check a meta-evaluation plan.

    Args:
        name_or_path: a shipped plan's name (:func:`meta_plan_names`) or a TOML file.
        data_folder: overrides the plan's ``data_folder`` / ``demo``.

    Raises:
        PlanError: an unknown plan or a bad field (the message names it and the fix).
    """
    from sde_core.pipeline.demo_recipes import default_demo_folder

    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        path = META_PLAN_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        raise PlanError(
            f"no meta-evaluation plan {name_or_path!r}: give a TOML file or one of "
            f"{meta_plan_names()}"
        )
    raw = read_toml(
        path, max_bytes=200_000, max_depth=8, what="meta-evaluation plan", error=PlanError
    )
    if data_folder is not None:
        folder = Path(data_folder)
    elif "data_folder" in raw:
        folder = (path.parent / str(raw["data_folder"])).resolve()
    elif "demo" in raw:
        try:
            folder = default_demo_folder(str(raw["demo"]))
        except ValueError as exc:
            raise PlanError(f"{path.name} demo: {exc}") from None
    else:
        raise PlanError(f'{path.name} needs demo = "mnist1d" or data_folder = "…"')
    model, zoo = _table(raw, "model", ""), _table(raw, "zoo", "")
    if not isinstance(model.get("arch"), str):
        raise PlanError(f'{path.name}: model.arch must name an architecture (e.g. "mlp")')
    returns = _table(zoo, "returns", "zoo")
    relearn = _table(returns, "relearn", "zoo.returns")
    fraction = relearn.get("fraction", 0.1)
    if not isinstance(fraction, (int, float)) or not 0.0 < fraction < 1.0:
        raise PlanError(f"zoo.returns.relearn.fraction must be in (0, 1), got {fraction!r}")
    quantise = returns.get("quantise", [])
    if not isinstance(quantise, list) or set(quantise) - set(QUANTISATIONS):
        raise PlanError(f"zoo.returns.quantise must be a list of {QUANTISATIONS}")
    weak = _table(zoo, "weak", "zoo")
    if set(weak) - set(ZOO_METHODS):
        raise PlanError(f"zoo.weak: unknown method(s) {sorted(set(weak) - set(ZOO_METHODS))}")
    ev = _table(raw, "eval", "")
    settings, defaults = _settings(ev)
    layers = ev.get("layers", [])
    if (
        not isinstance(layers, list)
        or not all(isinstance(x, str) and x.strip() for x in layers)
        or len(set(layers)) != len(layers)
        or settings.layer in layers
    ):
        raise PlanError(
            f"eval.layers must be a list of distinct layer names other than {settings.layer!r} "
            '(the first pass\'s), e.g. ["penultimate"]'
        )
    if not isinstance(model.get("kwargs", {}), dict):
        raise PlanError(f"{path.name}: model.kwargs must be a table, e.g. {{ hidden = 32 }}")
    _check_layers(path, model["arch"], dict(model.get("kwargs", {})), layers)
    originals = _ints(zoo, "original_seeds", "zoo", 2)
    bases = _ints(zoo, "bases", "zoo")
    if set(bases) - set(originals):
        raise PlanError("zoo.bases must be seeds listed in zoo.original_seeds")
    meta = _table(raw, "meta", "")
    reference = zoo.get("reference_seed", 1000)
    if not isinstance(reference, int) or reference in _ints(zoo, "retrained_seeds", "zoo", 2):
        raise PlanError("zoo.reference_seed must be an integer not in zoo.retrained_seeds")
    return MetaPlan(
        name=str(raw.get("name", path.stem)),
        title=str(raw.get("title", path.stem)),
        path=path,
        data_folder=folder,
        arch=model["arch"],
        arch_kwargs=dict(model.get("kwargs", {})),
        train=_table(raw, "train", ""),
        original_seeds=originals,
        retrained_seeds=_ints(zoo, "retrained_seeds", "zoo", 2),
        reference_seed=reference,
        bases=bases,
        methods=_methods(zoo),
        weak={k: dict(v) for k, v in weak.items()},
        relearn={
            "fraction": float(fraction),
            **{k: v for k, v in relearn.items() if k != "fraction"},
        },
        quantise=tuple(quantise),
        settings=settings,
        default_settings=defaults,
        layers=tuple(layers),
        bootstrap=int(meta.get("bootstrap", 2000)),
        meta_seed=int(meta.get("seed", 0)),
        raw=raw,
    )
