"""The evaluation engine: every statistic of method §3–6, §9 and §12 for every model of a
workspace.

The code lives in the :mod:`sde_core.pipeline.evaluation` package (subset planning, stage
caches, per-model statistics, staged runs, whole workspaces, the interactive session); this
module is the one place the rest of the library imports it from, and the source of the stable
re-export :mod:`sde_core.evaluate`.

Pipeline per model (all models share the same seeded subsets, so they are comparable):

1. activations of the chosen layer (and ``output`` for the classic metrics) on D_tr and D_te,
   from the on-disk activation cache when present;
2. σ from the rule; H for each of the B independent draws' references, panels and targets, the
   controlled F1 subsets and the null check's pairs
   (:func:`sde_core.stats.hsic.split_half_batch_stats`, which also yields the spread control),
   each batch a cached stage;
3. per draw the paper's evidence (reference U-test, JSD decisions, OTR, F1, dependence score)
   and the calibrated evidence (panel check, four-way verdicts, null check); combined over the
   draws into point values with intervals, gated on the calibrated panel test; the MMD /
   Wasserstein baselines and the classic metrics (Acc_r/f/te, MIA ASR).
"""

from sde_core.pipeline.evaluation import *  # noqa: F403
from sde_core.pipeline.evaluation import __all__ as _evaluation_all
from sde_core.pipeline.model_inputs import ModelInputs, Progress
from sde_core.pipeline.settings import ALGORITHM_VERSION, EvalSettings

__all__ = ["ALGORITHM_VERSION", "EvalSettings", "ModelInputs", "Progress", *_evaluation_all]
