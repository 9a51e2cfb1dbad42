"""The audit-grade report: verdicts, evidence, what was evaluated, as HTML, JSON and tables.

- :mod:`.document`: :func:`~.document.report_document` is the report as a JSON document: the
  evaluation's numbers (the CLI's method §10 document), each model's verdict and explanation,
  and the manifest of what was evaluated (checkpoint and data hashes, settings, seeds,
  software; see :mod:`sde_core.services.audit`). ``python -m sde_core verify`` recomputes it.
- :mod:`.html_page`: :func:`~.html_page.build_html_report` writes one self-contained HTML file
  (plotly.js inlined, no network request) that embeds the document, so the HTML alone can be
  verified. :func:`sde_core.viz.pdf.html_to_pdf` prints it to PDF.
- :mod:`.tables`: the report's tables (comparison, near ties, settings, per-draw values, null
  calibration, the manifest's data and files).
- :mod:`.caveats`: method §9's caveats written for a non-expert, with the numbers measured on
  the evaluation; the verdict sentences come from :mod:`sde_core.viz.verdicts`.
- :mod:`.exports`: download payloads (CSV, JSON, a zip of tables, e.g. for
  ``st.download_button``).
- :mod:`.paper_export`: everything for a paper in one ZIP: every figure as SVG and PDF
  (kaleido with the system Chromium), every table as LaTeX and Markdown.

Every number is written by :func:`sde_core.viz.formatting.format_number`. Import each name from
the module that defines it (docs/architecture.md).
"""
