"""The evaluation engine: every statistic of method §3–6, §9 and §12 for every model of a
workspace, split along its seams. Import each name from the module that defines it:

- :mod:`~.plan` — subset planning: the B independent draws, pools split into reference and
  control halves (:func:`~.plan.draw_subsets`);
- :mod:`~.stages` — stage caches keyed by exactly what each stage depends on;
- :mod:`~.draw_statistics` — each draw's statistics, part by part as its stages finish;
- :mod:`~.statistics` — their combination over the draws (intervals and the gate);
- :mod:`~.summary` — :class:`~.summary.ModelSummary` / :class:`~.summary.DrawSummary` and the
  JSON document;
- :mod:`~.run` — one model, stage by stage, with partial results (:class:`~.run.ModelRun`);
- :mod:`~.run_driver` — running it to the end with progress and cancellation
  (:func:`~.run_driver.run_model`, :func:`~.run_driver.evaluate_arrays`);
- :mod:`~.model_evaluation` — what one model's evaluation holds
  (:class:`~.model_evaluation.ModelEvaluation`: summary, draws, subset rows, H arrays);
- :mod:`~.workspace_run` — whole workspaces with the results store
  (:func:`~.workspace_run.evaluate_workspace`);
- :mod:`~.session` — interactive use by the dashboard (:class:`~.session.EvaluationSession`);
- :mod:`~.caveats` — the measured caveats of an evaluation (:func:`~.caveats.caveat_numbers`).

The settings are :class:`sde_core.pipeline.settings.EvalSettings`; what one model contributes is
:class:`sde_core.pipeline.model_inputs.ModelInputs`.

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
