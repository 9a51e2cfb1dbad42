"""Experiment plans: the paper's protocols (method §8) as TOML files run headless and resumably.

A **plan** (``plans/<name>.toml``, read with :mod:`tomllib`) names one *experiment kind*, the
parameters of the protocol, and one or more **variants** (``default`` on mnist1d for two CPU
cores, ``fashion-mnist`` on real images, ``cifar10-resnet18`` for the paper's own setting). A
variant's tables are deep-merged over the plan's top-level tables; ``--override key=value``
(dotted keys, TOML values) is applied last, e.g. ``params.seeds=[0]`` or ``train.epochs=1``.

Plan file keys (top level; ``variants.<name>`` may repeat every key marked *)::

    name, experiment, title, paper, description, sweep     strings (experiment ∈ EXPERIMENTS)
    notes*      list of strings: reductions against the paper, caveats (shown in reports)
    device*     "cpu" | "auto" | "cuda" (training and activation extraction; not hashed)
    params*     experiment parameters (see the ``*Params`` dataclasses)
    eval*       EvalSettings fields except layer / sigma / subset_size / seed (set in params)
    dataset*    a DatasetSpec table; a relative ``root`` is resolved against the work folder
    model*      {arch = "...", kwargs = {...}}
    train*      TrainConfig fields except seed (params.seeds) and device

Experiment kinds:

- ``retrained`` (Table 1, Table 3, Fig. 3, Fig. 4, training sufficiency): for every seed and
  forget ratio R a model is trained on D_r = D_tr minus a random R·|D_tr| forget set, then every
  combination of ``checkpoints × layers × sigmas × subset_sizes`` is evaluated; the controlled
  F1 separates subsets of D_r (in-training) from subsets of D_f (out-of-training). With
  ``eval.baseline_targets > 0`` the MMD and Wasserstein-2 baselines are scored too (Table 3).
- ``methods`` (Table 4): an original model on D_tr, the retrained model and every unlearning
  method of ``params.methods`` (plus the randomly initialised weights), evaluated at each layer
  with Acc_r, Acc_f, Acc_te, MIA ASR, F1 (D_r vs D_te subsets, as the paper states) and OTR.
- ``histograms`` (Fig. 2): H(S_IT), H(S_OOT) and H(S_target ⊂ D_f) under h_or, h_rand, h_re.
- ``workspace`` (issue 35, ``lm_representations``): an existing workspace's models evaluated at
  every ``params.layers`` × ``params.poolings`` × ``params.seeds`` at its ``[defaults]``
  (:mod:`~.workspace_study`), each ``points`` row with the model's behaviour from the
  workspace's ``metrics.json`` (``behaviour_loss_gap``, ``behaviour_mia_auc``).
- ``toy`` (App. A.4): synthetic binary task, one-hidden-layer MLP trained with fixed batch
  membership; H(same-batch subsets) vs H(cross-batch subsets) over training steps.

Jobs. :func:`~.graph.build_jobs` turns a variant into self-contained :class:`~.graph.PlanJob` s
(``train``, ``unlearn``, ``evaluate``, ``toy``) with explicit dependencies;
:func:`~.execute.run_job` executes one as a pure function
``(job, context, dependency jobs) -> JobResult`` (table rows and arrays). Model files are
content-addressed artefacts ``<work>/artifacts/<kind>-<hash>/`` (the hash covers everything
that determines the weights), so plans that need the same model share it and a job whose
artefact exists returns at once. Only the driver (:func:`~.driver.run_plan`) writes the
:class:`~sde_core.pipeline.store.ResultsStore`: one *run* per (plan, variant, resolved
configuration,
data fingerprint, :data:`~sde_core.pipeline.settings.ALGORITHM_VERSION`) — ``workspace_hash =
"plan:<hash>"``, settings ``{"plan", "experiment", "variant", "config", "data", "algorithm"}``,
label ``"plan <name> [<variant>]"`` — and one store *unit* per
job (unit key = :attr:`~.graph.PlanJob.key`). A repeated run skips every stored unit; an
interrupted run keeps every finished job.

Store tables of a plan run (one row per record; the Sweeps page reads these):

``points`` — one row per evaluation (every experiment but ``toy``):
    plan, experiment, variant (str); param (the plan's ``sweep`` axis: subset_size, sigma,
    layer, checkpoint, forget_ratio, method or model), value (that axis' value as text), x
    (float: numeric position of the value — n, σ, fraction, R, or the index of a layer / method /
    model in the plan's list); seed (int), model (str: "retrained", "original", "random", or the
    method name), role ("retrained" | "original" | "unlearned" | "random"), method, forget_ratio,
    subset_size, layer, sigma_rule (the σ entry in the syntax of sde_core.common.sigma), checkpoint
    (fraction of training; 0 = initial weights), dim (d of the layer), sigma (numeric σ used);
    paper's procedure: f1, f1_precision, f1_recall, otr, otr_lo, otr_hi (95% Wilson),
    references_valid, reference_p, dependence_score; calibrated evidence (method §9):
    panel_valid, panel_p, calibrated_otr, calibrated_f1, null_split_fpr, null_calibrated_fpr,
    score_spread_corr; baselines: mmd_f1, w2_f1 (NaN when off); classic metrics: acc_r, acc_f,
    acc_te (%, NaN when not computed), asr (fraction, ``methods`` only); eval_seconds.
``models`` — one row per trained or unlearned model: plan, experiment, variant, job, model,
    role, method, seed, forget_ratio, epochs, final_loss, acc_train (% on the data it was
    trained on), acc_test (%), seconds (training / unlearning wall time), reused (bool: the
    artefact already existed), params (JSON text of the method's hyper-parameters).
``h_values`` — ``histograms`` only: plan, variant, seed, model, role, set ("S_IT", "S_OOT",
    "S_target"), split (int), h (float). The same values are stored as arrays
    ``"<job key>/<set>"`` of shape (K,).
``toy_steps`` — ``toy`` only, one row per (seed, layer, step): plan, variant, seed, layer, step,
    epoch, same_mean, cross_mean, same_sd, cross_sd (over subset scores), p_subset (one-sided
    Mann-Whitney U on the subset scores, same > cross), p_split (the paper's test: U on the
    pooled split values), train_acc (%), loss.
``toy_subsets`` — ``toy`` only: seed, layer, step, kind ("same" | "cross"), subset, score
    (mean H over the splits), spread (method §9 spread control).
"""
