"""Each model's verdict in words a non-expert can read, with the evidence it rests on.

- :mod:`.labels`: the verdict words, their styles and icons, and how a row's estimates read.
- :mod:`.explanation`: :func:`~.explanation.explain_verdict`, the one place that turns a row of
  an evaluation's ``models`` table into sentences (the dashboard and the report show its text).
- :mod:`.null_check`: what the measured false-alarm rates of the null check say.
- :mod:`.summary`: each model's short answer and the caveats, for a report's first page.

Import each name from the module that defines it (docs/architecture.md).
"""
