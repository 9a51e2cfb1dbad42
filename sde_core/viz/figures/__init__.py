"""Plotly figures of an evaluation (UI-free: every builder is a pure function returning a Figure).

Colours are the colour-blind-safe Okabe–Ito palette and mean the same thing in every chart:
in-training references (S_IT, the IT panel, "in-training" verdicts) are blue, out-of-training
references (S_OOT, the OOT panel, "out-of-training" verdicts) orange, target subsets of the
forget set reddish purple, inconclusive verdicts grey.

- :mod:`.style`: the palette, the chart layout, the metric labels and :data:`~.style.PLOTLY_CONFIG`
  (client-side PNG download from the chart's camera button);
- :mod:`.distributions`: the HSIC histogram (Fig. 2), the target overlay, the signal grid, the
  reference panels and the spread control (method §9);
- :mod:`.comparison`: one metric per model with error bars (:func:`~.comparison.comparison_bars`)
  and each headline number's per-draw strip (method §12);
- :mod:`.sweeps`: a metric vs σ / layer / subset size / checkpoint, and a plan's points;
- :mod:`.leaderboard`: every unlearned model's paired differences to the retrained model and
  the original with their intervals, ranked closest to retraining first (method §15);
- :mod:`.export`: server-side PNG/SVG through kaleido and a system Chromium.

Numbers: axes of split-half HSIC values use SI prefixes (``35µ``) and hover texts are written
by :func:`sde_core.viz.formatting.column_formatter`, the format of the tables and the report.
Import each name from the module that defines it (docs/architecture.md).
"""
