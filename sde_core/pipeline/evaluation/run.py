"""One model's evaluation, stage by stage, with partial results after each stage (method §12).

:class:`ModelRun` evaluates one model from its activations (:class:`ModelInputs`) in the order a
page shows things:

1. per draw b = 0, 1, …: S_IT, S_OOT and the draw's targets (``"references"``: the first
   histogram and JSD decisions), then the draw's reference panels (``"panels"``: calibrated
   verdicts and the gate);
2. the controlled F1 subsets of every draw (``"controls"``);
3. the null check's pairs (``"null"``);
4. the classic metrics (``"classic"``: accuracies and the MIA attack, σ-independent);
5. the MMD baseline (``"mmd"``), then the exact Wasserstein-2 baseline (``"w2"``, O(n³) per
   pair, last so it never delays anything else).

:meth:`ModelRun.steps` yields a :class:`PartialEvaluation` after every step; its
:meth:`~PartialEvaluation.evaluation` builds the :class:`~.model_evaluation.ModelEvaluation` of
everything finished so far (numbers of unfinished parts are NaN, and the gate withholds the
headline numbers until the first panel is known). Stopping the iteration (or a ``cancelled()``
that returns True in :func:`~.run_driver.run_model`) keeps every finished stage in the
:class:`~.stages.StageCache`, so running again resumes where it stopped. The final result is
identical, number for number, to a one-shot evaluation with the same settings: both run the same
stages on the same batches and seeds. Running a :class:`ModelRun` to the end (progress, updates,
cancellation) is :mod:`~.run_driver`; what its result holds, :mod:`~.model_evaluation`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field, fields, replace
from functools import partial
from typing import Any

import numpy as np

from sde_core.common.hashing import array_sha256
from sde_core.errors import SettingsError
from sde_core.pipeline.evaluation.class_wise import class_wise_tables
from sde_core.pipeline.evaluation.draw_statistics import (
    DrawState,
    control_statistics,
    core_statistics,
    draw_null_check,
    null_train_calls,
    panel_statistics,
)
from sde_core.pipeline.evaluation.model_evaluation import (
    ModelEvaluation,
    stacked_arrays,
    subset_rows,
)
from sde_core.pipeline.evaluation.plan import (
    F1_NEGATIVE_POOLS,
    F1Negatives,
    HGroup,
    SubsetPlan,
    default_f1_negatives,
    group_seed,
    null_top_up,
    null_top_up_counts,
)
from sde_core.pipeline.evaluation.precision import PrecisionDesign, design_from_pilot, with_design
from sde_core.pipeline.evaluation.stages import (
    StageCache,
    classic_key,
    compute_h,
    distance_key,
    h_key,
    mmd_key,
    w2_key,
)
from sde_core.pipeline.evaluation.statistics import summarize
from sde_core.pipeline.evaluation.summary import BEHAVIOUR_FIELDS, DrawSummary, ModelSummary
from sde_core.pipeline.model_inputs import ModelInputs
from sde_core.pipeline.settings import EvalSettings
from sde_core.stats.baselines import nearest_reference_batch, wasserstein2
from sde_core.stats.headline import controlled_f1
from sde_core.stats.hsic import resolve_sigma
from sde_core.stats.near_ties import h_relative_tolerance

__all__ = [
    "STAGES",
    "ModelRun",
    "PartialEvaluation",
]

#: The stages of a model's evaluation, in the order they run.
STAGES: tuple[str, ...] = ("references", "panels", "controls", "null", "classic", "mmd", "w2")

_NAN = float("nan")


@dataclass
class PartialEvaluation:
    """Progress of a :class:`ModelRun` after one step.

    Attributes:
        model: the model's name. stage: one of :data:`STAGES`. label: what just finished, in
            words (``"draw 1 of 5: references and targets"``). done, total: steps finished and
            planned. complete: True after the last step.
    """

    model: str
    stage: str
    label: str
    done: int
    total: int
    complete: bool
    _run: ModelRun = field(repr=False)
    _state: _Snapshot = field(repr=False)
    _cached: ModelEvaluation | None = field(default=None, repr=False)

    def evaluation(self) -> ModelEvaluation:
        """The :class:`ModelEvaluation` of everything finished at this step (built on first
        call from a snapshot taken at the step, so later steps do not change it; cheap — no
        HSIC is recomputed)."""
        if self._cached is None:
            self._cached = self._run.evaluation(complete=self.complete, state=self._state)
        return self._cached


@dataclass(frozen=True)
class _Snapshot:
    """What a :class:`ModelRun` had finished at one step (shallow copies)."""

    draws: tuple[DrawState, ...]
    extras: dict[str, Any]
    elapsed: float
    design: PrecisionDesign | None = None


class ModelRun:
    """The staged evaluation of one model (see the module docstring).

    Args:
        inputs: the model's activations, probabilities and labels.
        plan: the subsets (:func:`~.plan.draw_subsets`, shared by all models).
        settings: evaluation settings.
        f1_negatives: pool of the controlled F1's negatives (``"forget"`` or ``"test"``;
            default: method §5's choice for ``inputs.role``).
        cache: the stage cache (default: none — a one-shot evaluation).
        stages: the stages to run (default all of :data:`STAGES`; ``"references"`` always runs).

    Raises:
        SettingsError: malformed activations, an unknown stage or F1 pool.
    """

    def __init__(
        self,
        inputs: ModelInputs,
        plan: SubsetPlan,
        settings: EvalSettings,
        *,
        f1_negatives: F1Negatives | None = None,
        cache: StageCache | None = None,
        stages: Collection[str] = STAGES,
    ) -> None:
        tr, te = inputs.train_acts, inputs.test_acts
        if tr.ndim != 2 or te.ndim != 2 or tr.shape[1] != te.shape[1]:
            raise SettingsError(
                f"train/test activations must be (n, d) with the same d; got {tr.shape} and "
                f"{te.shape}"
            )
        unknown = sorted(set(stages) - set(STAGES))
        if unknown:
            raise SettingsError(f"unknown stages {unknown}; stages are {list(STAGES)}")
        pool = f1_negatives or default_f1_negatives(inputs.role)
        if pool not in F1_NEGATIVE_POOLS:
            raise SettingsError(
                f"f1_negatives must be one of {list(F1_NEGATIVE_POOLS)}; got {pool!r}"
            )
        self.inputs, self.plan, self.settings = inputs, plan, settings
        self.f1_negatives: F1Negatives = pool
        self.cache = cache or StageCache(None, memory_items=0)
        self.stages = frozenset(stages) | {"references"}
        self.draws = [DrawState(d.index) for d in plan.draws]
        self.extras: dict[str, Any] = {
            "seconds": _NAN if inputs.seconds is None else float(inputs.seconds)
        }
        self._groups = [d.groups(settings.seed, pool) for d in plan.draws]
        self._digests: dict[str, str] = {}
        self._elapsed = 0.0
        #: The precision design (method §15), fixed after the pilot; None: the fixed design.
        self.design: PrecisionDesign | None = None
        self.pilot_draws = len(plan.draws)
        if settings.precision > 0:
            self.pilot_draws = min(settings.pilot_draws, len(plan.draws))
        references = self._reference_activations()
        self.sigma = resolve_sigma(settings.sigma, references, seed=settings.seed)
        self.extras["h_rtol"] = h_relative_tolerance(references, seed=settings.seed)

    # ------------------------------------------------------------------ inputs

    def _reference_activations(self) -> np.ndarray:
        it_rows, oot_rows = self.plan.reference_rows()
        return np.concatenate([self.inputs.train_acts[it_rows], self.inputs.test_acts[oot_rows]])

    def _acts(self, side: str) -> np.ndarray:
        return self.inputs.train_acts if side == "train" else self.inputs.test_acts

    def _digest(self, name: str) -> str:
        """Content hash of one of the inputs' arrays (computed once)."""
        if name not in self._digests:
            value = {
                "train": self.inputs.train_acts,
                "test": self.inputs.test_acts,
                "train_probs": self.inputs.train_probs,
                "test_probs": self.inputs.test_probs,
                "train_labels": self.inputs.train_labels,
                "test_labels": self.inputs.test_labels,
            }[name]
            assert value is not None
            self._digests[name] = array_sha256(np.asarray(value))
        return self._digests[name]

    # ------------------------------------------------------------------ stages

    def _h(self, group: HGroup) -> dict[str, np.ndarray]:
        acts = self._acts(group.side)
        key = ""
        if self.cache.enabled:
            dist = distance_key(self._digest(group.side), group.rows)
            key = h_key(dist, self.sigma, self.settings, group.seed)
            found = self.cache.get("h", key)
            if found is not None:
                return found
        out = compute_h(acts, group, self.sigma, self.settings)
        if self.cache.enabled:
            self.cache.put("h", key, out)
        return out

    def _core(self, b: int) -> None:
        st, groups = self.draws[b], self._groups[b]
        tr, te = self._h(groups["core_train"]), self._h(groups["core_test"])
        st.arrays.update(it_h=tr["h"][0], targets_h=tr["h"][1:], oot_h=te["h"][0])
        st.spreads.update(it_ref=tr["spread"][:1], targets=tr["spread"][1:], oot_ref=te["spread"])
        st.core = core_statistics(
            st.arrays["it_h"], st.arrays["oot_h"], st.arrays["targets_h"], self.settings
        )

    def _panel(self, b: int) -> None:
        st, groups = self.draws[b], self._groups[b]
        it, oot = self._h(groups["panel_train"]), self._h(groups["panel_test"])
        st.arrays.update(panel_it_h=it["h"], panel_oot_h=oot["h"])
        st.spreads.update(panel_it=it["spread"], panel_oot=oot["spread"])
        assert st.core is not None
        st.panel = panel_statistics(st.core, it["h"], oot["h"], self.settings)
        if st.controls is not None:  # controls finished first (stage subset): add verdicts
            self._control_stats(b)
        if "null_h" in st.arrays:
            self._null_stats(b)

    def _controls(self, b: int) -> None:
        st, groups = self.draws[b], self._groups[b]
        pos, neg = self._h(groups["controls_pos"]), self._h(groups["controls_neg"])
        st.arrays.update(pos_h=pos["h"], neg_h=neg["h"])
        st.spreads.update(pos=pos["spread"], neg=neg["spread"])
        self._control_stats(b)

    def _control_stats(self, b: int) -> None:
        st = self.draws[b]
        st.controls = control_statistics(
            st.arrays["it_h"], st.arrays["oot_h"], st.arrays["pos_h"], st.arrays["neg_h"],
            st.panel, self.settings,
        )  # fmt: skip

    def _null(self, b: int) -> None:
        """Draw b's null check: its pairs, and in a precision design the pairs and training
        subsets that size it (:func:`~.plan.null_top_up`, method §9)."""
        st, d, seed = self.draws[b], self.plan.draws[b], self.settings.seed
        pairs, train = null_top_up(d, 0 if self.design is None else self.design.draws,
                                   self.settings)  # fmt: skip
        own = self._groups[b].get("null")
        parts = [] if own is None else [self._h(own)]
        if len(pairs):
            rows = pairs.reshape(-1, d.it_ref.size)
            extra = HGroup("null_extra", b, "test", rows, group_seed(seed, b, "null_extra"))
            parts.append(self._h(extra))
        if parts:
            st.arrays["null_h"] = np.vstack([p["h"] for p in parts])
            st.spreads["null"] = np.concatenate([p["spread"] for p in parts])
        if len(train):
            group = HGroup("null_train", b, "train", train, group_seed(seed, b, "null_train"))
            out = self._h(group)
            st.arrays["null_train_h"] = out["h"]
            st.spreads["null_train"] = out["spread"]
        self._null_stats(b)

    def _sized_null(self, b: int, n_draws: int) -> bool:
        """Whether draw b adds subsets to the null check (a precision design's sizing)."""
        if self.design is None:
            return False
        return any(null_top_up_counts(self.plan.draws[b], n_draws, self.settings))

    def _null_stats(self, b: int) -> None:
        st = self.draws[b]
        st.null = draw_null_check(st, self.settings)
        st.null_train = null_train_calls(st, self.settings)

    def _classic(self) -> None:
        inp = self.inputs
        if inp.train_probs is None or inp.test_probs is None or inp.train_labels is None:
            return
        from sde_core.learning.metrics import ClassicMetrics, behaviour_check, metrics_from_probs

        names = {f.name for f in fields(ClassicMetrics)} | set(BEHAVIOUR_FIELDS)

        key = ""
        if self.cache.enabled:
            digests = {
                name: self._digest(name)
                for name in ("train_probs", "test_probs", "train_labels", "test_labels")
            }
            digests["forget"] = array_sha256(self.plan.forget)
            digests["retain"] = array_sha256(self.plan.retain)
            key = classic_key(digests, self.settings.seed)
            found = self.cache.get("classic", key)
            if found is not None and names <= set(found):
                self.extras.update({k: float(v) for k, v in found.items()})
                return
        m = metrics_from_probs(
            inp.train_probs, inp.train_labels, inp.test_probs, inp.test_labels,
            self.plan.forget, self.plan.retain, seed=self.settings.seed,
        )  # fmt: skip
        behaviour = behaviour_check(
            inp.train_probs, inp.train_labels, inp.test_probs, inp.test_labels,
            self.plan.forget, self.plan.retain, seed=self.settings.seed,
        )  # fmt: skip
        # floats, as the cache gives them back
        values = {k: float(v) for k, v in {**m.to_dict(), **behaviour.to_dict()}.items()}
        if self.cache.enabled:
            self.cache.put(
                "classic", key, {k: np.asarray(v, dtype=np.float64) for k, v in values.items()}
            )
        self.extras.update(values)

    def _baseline_clouds(self, b: int) -> tuple[list[np.ndarray], list[object]]:
        """``(rows, activations)`` of draw b's baseline controls: positives then negatives."""
        d = self.plan.draws[b]
        k = d.baseline_controls
        neg_acts = self._acts("train" if self.f1_negatives == "forget" else "test")
        rows = list(d.f1_pos[:k]) + list(d.f1_negatives(self.f1_negatives)[:k])
        acts: list[object] = [self.inputs.train_acts[r] for r in d.f1_pos[:k]]
        acts += [neg_acts[r] for r in d.f1_negatives(self.f1_negatives)[:k]]
        return rows, acts

    def _reference_digests(self, b: int) -> dict[str, str]:
        d = self.plan.draws[b]
        return {
            "train": self._digest("train"),
            "test": self._digest("test"),
            "it": array_sha256(d.it_ref),
            "oot": array_sha256(d.oot_ref),
            "negatives": self.f1_negatives,
        }

    def _mmd(self) -> None:
        for b, d in enumerate(self.plan.draws):
            if d.baseline_controls == 0:
                continue
            rows, clouds = self._baseline_clouds(b)
            key = ""
            if self.cache.enabled:
                parts = {**self._reference_digests(b), "controls": array_sha256(np.stack(rows))}
                key = mmd_key(parts, self.sigma)
                found = self.cache.get("mmd", key)
                if found is not None:
                    self.draws[b].mmd = found["d"]
                    continue
            it = self.inputs.train_acts[d.it_ref]
            oot = self.inputs.test_acts[d.oot_ref]
            dec = nearest_reference_batch(clouds, it, oot, "mmd", self.sigma)
            out = np.array([[x.d_it, x.d_oot] for x in dec])
            if self.cache.enabled:
                self.cache.put("mmd", key, {"d": out})
            self.draws[b].mmd = out

    def _w2_pair(self, b: int, i: int) -> np.ndarray:
        """Exact W2 of draw b's baseline control i to its S_IT and S_OOT (cached per control)."""
        d = self.plan.draws[b]
        rows, clouds = self._baseline_clouds(b)
        key = ""
        if self.cache.enabled:
            key = w2_key({**self._reference_digests(b), "control": array_sha256(rows[i])})
            found = self.cache.get("w2", key)
            if found is not None:
                return found["d"]
        it = self.inputs.train_acts[d.it_ref]
        oot = self.inputs.test_acts[d.oot_ref]
        out = np.array([wasserstein2(clouds[i], it), wasserstein2(clouds[i], oot)])
        if self.cache.enabled:
            self.cache.put("w2", key, {"d": out})
        return out

    # ------------------------------------------------------------------ schedule

    def _draw_steps(self, first: int, last: int) -> list[tuple[str, str, Callable[[], None]]]:
        """The references, targets and panels of draws ``first`` … ``last − 1``."""
        steps: list[tuple[str, str, Callable[[], None]]] = []
        pilot = self.settings.precision > 0 and last <= self.pilot_draws
        for b in range(first, last):
            of = f"{'pilot ' if pilot else ''}draw {b + 1} of {last}"
            steps.append(("references", f"{of}: references and targets", partial(self._core, b)))
            if "panels" in self.stages:
                steps.append(("panels", f"{of}: reference panels", partial(self._panel, b)))
        return steps

    def _schedule(self, first: int = 0) -> list[tuple[str, str, Callable[[], None]]]:
        """``(stage, label, action)`` of every step from draw ``first`` on, in order (the draws
        in use: all the plan's, the pilot's, or those the precision design fixed)."""
        n_draws = self.pilot_draws if self.design is None else self.design.draws
        steps = self._draw_steps(first, n_draws)
        if "controls" in self.stages:
            for b in range(n_draws):
                label = f"controlled F1: draw {b + 1} of {n_draws}"
                steps.append(("controls", label, partial(self._controls, b)))
        if "null" in self.stages:
            for b in range(n_draws):
                if "null" in self._groups[b] or self._sized_null(b, n_draws):
                    label = f"null check: draw {b + 1} of {n_draws}"
                    steps.append(("null", label, partial(self._null, b)))
        if "classic" in self.stages:
            steps.append(("classic", "accuracies and membership attack", self._classic))
        baseline = self.settings.baseline_targets > 0 and "controls" in self.stages
        if baseline and "mmd" in self.stages:
            steps.append(("mmd", "MMD baseline", self._mmd))
        if baseline and "w2" in self.stages:
            for b, d in enumerate(self.plan.draws[:n_draws]):
                for i in range(2 * d.baseline_controls):
                    label = f"Wasserstein-2 baseline: draw {b + 1}, subset {i + 1}"
                    steps.append(("w2", label, partial(self._w2_step, b, i)))
        return steps

    def _w2_step(self, b: int, i: int) -> None:
        st = self.draws[b]
        k2 = 2 * self.plan.draws[b].baseline_controls
        if st.w2 is None:
            st.w2 = np.full((k2, 2), np.nan)
        st.w2[i] = self._w2_pair(b, i)

    def _snapshot(self) -> _Snapshot:
        draws = tuple(
            replace(
                st,
                arrays=dict(st.arrays),
                spreads=dict(st.spreads),
                w2=None if st.w2 is None else st.w2.copy(),
            )
            for st in self.draws
        )
        return _Snapshot(
            draws=draws, extras=dict(self.extras), elapsed=self._elapsed, design=self.design
        )

    def steps(self) -> Iterator[PartialEvaluation]:
        """Run every step, yielding a :class:`PartialEvaluation` after each.

        With a precision target (method §15) the pilot's draws run first; their spread fixes
        the draws (:meth:`decide`), then the remaining draws and the other stages run."""
        precise = self.settings.precision > 0
        pilot = self._draw_steps(0, self.pilot_draws) if precise and self.design is None else []
        after_pilot = self.pilot_draws if precise else 0
        rest = [] if pilot else self._schedule(after_pilot)
        total = len(pilot) + len(self._schedule(after_pilot)) if pilot else len(rest)
        done = 0
        for stage, label, action in pilot:
            done += 1
            yield self._step(stage, label, action, done, total)
        if pilot:
            self.decide()
            rest = self._schedule(after_pilot)
            total = done + len(rest)
        for stage, label, action in rest:
            done += 1
            yield self._step(stage, label, action, done, total)

    def _step(
        self, stage: str, label: str, action: Callable[[], None], done: int, total: int
    ) -> PartialEvaluation:
        t0 = time.perf_counter()
        action()
        self._elapsed += time.perf_counter() - t0
        return PartialEvaluation(
            model=self.inputs.name, stage=stage, label=label, done=done, total=total,
            complete=done == total, _run=self, _state=self._snapshot(),
        )  # fmt: skip

    def decide(self) -> PrecisionDesign:
        """Fix the precision design from the pilot's draws (computing any pilot draw not run
        yet; method §15). The planner calls it to predict a run; :meth:`steps` calls it after
        the pilot."""
        if self.design is not None:
            return self.design
        t0 = time.perf_counter()
        for b in range(self.pilot_draws):
            if self.draws[b].core is None:
                self._core(b)
            if "panels" in self.stages and self.draws[b].panel is None:
                self._panel(b)
        self._elapsed += time.perf_counter() - t0
        pilot = self.draws[: self.pilot_draws]
        summary, _ = self._summarize(self._snapshot())
        self.design = design_from_pilot(pilot, summary, self.settings)
        return self.design

    # ------------------------------------------------------------------ results

    def _baseline_f1(self, draws: tuple[DrawState, ...], attr: str) -> dict[int, tuple[float, int]]:
        """``{draw: (F1, controls)}`` of a baseline's nearest-reference decisions, per draw
        that scored all its baseline controls (positives then negatives)."""
        out: dict[int, tuple[float, int]] = {}
        for b, d in enumerate(self.plan.draws):
            values = getattr(draws[b], attr)
            k = d.baseline_controls
            if values is None or k == 0 or np.isnan(values).any():
                continue
            truth = [True] * k + [False] * k
            pred = [bool(x) for x in values[:, 0] <= values[:, 1]]
            out[d.index] = (controlled_f1(truth, pred).f1, 2 * k)
        return out

    def evaluation(self, complete: bool = True, state: _Snapshot | None = None) -> ModelEvaluation:
        """The :class:`ModelEvaluation` of everything finished so far (or at ``state``)."""
        snap = state or self._snapshot()
        summary, draws = self._summarize(snap)
        return ModelEvaluation(
            model=summary,
            draws=draws,
            subsets=subset_rows(self.inputs.name, self.plan, self.settings, snap.draws, summary),
            arrays=stacked_arrays(snap.draws),
            complete=complete,
            tables=class_wise_tables(self, complete),
        )

    def _summarize(self, snap: _Snapshot) -> tuple[ModelSummary, list[DrawSummary]]:
        """The model's summary and draw rows at ``snap`` (Stein's intervals once a precision
        design is fixed)."""
        inp, s = self.inputs, self.settings
        identity = {
            "name": inp.name,
            "role": inp.role,
            "method": inp.method,
            "layer": s.layer,
            "dim": int(inp.train_acts.shape[1]),
            "sigma": float(self.sigma),
            "f1_negatives": self.f1_negatives,
        }
        extras = dict(snap.extras)
        baselines = {name: self._baseline_f1(snap.draws, name) for name in ("mmd", "w2")}
        extras["baseline_controls"] = 2 * sum(d.baseline_controls for d in self.plan.draws)
        extras["eval_seconds"] = snap.elapsed
        summary, draws = summarize(
            identity, snap.draws, s, extras, self.plan.notes, baselines=baselines
        )
        if snap.design is not None:
            summary = with_design(summary, snap.draws, snap.design)
        return summary, draws
