"""The meta-evaluation (method §17): how often SDE's verdict and the retrain-free scores are
right, on a zoo of checkpoints whose truth is known.

- ``spec.py``: the plan (zoo, evaluation settings, bootstrap), read from a TOML file;
  the shipped plans live in ``plans/``.
- ``zoo.py``: the checkpoint zoo, built and cached one checkpoint at a time.
- ``truth.py``: each checkpoint's truth, from its behaviour on D_f against the retrained and
  original ensembles (what the verdict must not use).
- ``scores.py``: the retrain-free scores of each checkpoint (SDE's evaluation, MMD, W2, the
  attacks and gaps), cached per checkpoint.
- ``agreement.py``: faithfulness AUC, Spearman correlation, robustness and their bootstrap
  intervals, the null check's gated share, the table and the ROC curves.
- ``null_sizing.py``: the null check's power with the draws' pooled interval and the panel
  effect (method §9).
- ``summary.py``: the summary numbers of ``meta_eval_<plan>.json`` (the verdict's ordinal, the
  null check's power at both designs, the default design's draws and precision states, the
  withheld verdicts by reason, the scores at other layers).
"""
