"""Everything for a paper in one archive: :func:`paper_bundle` writes the report's figures as
SVG and PDF (publication size, the colour-blind palette kept, fill patterns drawn as outlines
so a PDF stays vector) and its tables as LaTeX (``booktabs``) and Markdown.

The tables are the report's, for reading: the comparison in its two groups (headline numbers;
diagnostics and classic metrics), the method leaderboard (paired differences, method §15), the
verdicts and the settings — every number written by
:func:`~sde_core.viz.formatting.format_number`, so a table in the paper shows what the
dashboard shows. :func:`table_to_latex` and :func:`table_to_markdown` escape every cell: a
model named ``a_b|c`` stays one cell that reads ``a_b|c``.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from sde_core.errors import ExportError, SettingsError
from sde_core.viz.figures.export import figures_to_images
from sde_core.viz.figures.leaderboard import leaderboard_table, leaderboard_text
from sde_core.viz.report.html_page import print_ready, report_figures
from sde_core.viz.report.tables import COMPARISON_GROUPS, comparison_table, settings_table
from sde_core.viz.verdicts.explanation import verdict_table

__all__ = [
    "PAPER_FIGURE_FORMATS",
    "PaperBundle",
    "paper_bundle",
    "paper_figures",
    "paper_tables",
    "publication_style",
    "table_to_latex",
    "table_to_markdown",
]

#: The figure formats of :func:`paper_bundle` (vector both).
PAPER_FIGURE_FORMATS = ("svg", "pdf")
#: One column of a two-column paper is ~3.3 in; a full-width figure ~7 in, drawn at 96 dpi.
_WIDTH, _HEIGHT, _FONT, _PANEL_WIDTH = 720, 440, 13, 260

_LATEX_SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}
_LATEX_RE = re.compile("|".join(re.escape(c) for c in _LATEX_SPECIALS))
#: Unicode the report's numbers and labels use, written so pdflatex needs no extra package.
_LATEX_UNICODE = {"−": "$-$", "σ": r"$\sigma$", "α": r"$\alpha$", "√": r"$\surd$", "–": "--",
                  "—": "---", "≤": r"$\leq$", "≥": r"$\geq$", "±": r"$\pm$", "×": r"$\times$",
                  "→": r"$\to$", "≈": r"$\approx$"}  # fmt: skip
_SLUG_RE = re.compile(r"[^a-z0-9]+")


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return str(value)


def latex_escape(text: str) -> str:
    """``text`` as LaTeX source that prints it (specials escaped, the report's Unicode symbols
    as math; line breaks as spaces)."""
    out = _LATEX_RE.sub(lambda m: _LATEX_SPECIALS[m.group(0)], " ".join(text.splitlines()))
    for char, tex in _LATEX_UNICODE.items():
        out = out.replace(char, tex)
    return out


def table_to_latex(df: pd.DataFrame, *, caption: str = "", label: str = "") -> str:
    """A ``booktabs`` LaTeX table of ``df`` (every cell as text, escaped; no index)."""
    header = " & ".join(rf"\textbf{{{latex_escape(str(c))}}}" for c in df.columns)
    body = [
        " & ".join(latex_escape(_cell(v)) for v in row) + r" \\"
        for row in df.itertuples(index=False, name=None)
    ]
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        r"\begin{tabular}{" + "l" * max(len(df.columns), 1) + "}",
        r"\toprule",
        header + r" \\",
        r"\midrule",
        *body,
        r"\bottomrule",
        r"\end{tabular}",
    ]
    if caption:
        lines.append(rf"\caption{{{latex_escape(caption)}}}")
    if label:
        lines.append(rf"\label{{{_slug(label)}}}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    """A Markdown table cell that prints ``text`` literally: ``|`` and backslashes escaped, the
    characters that start inline markup or links escaped, line breaks as spaces."""
    out = " ".join(text.splitlines())
    return re.sub(r"([\\|`*_\[\]<>#!])", r"\\\1", out)


def table_to_markdown(df: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table of ``df`` (every cell escaped; no index)."""
    columns = [_md(str(c)) for c in df.columns] or [""]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += [
        "| " + " | ".join(_md(_cell(v)) for v in row) + " |"
        for row in df.itertuples(index=False, name=None)
    ]
    return "\n".join(lines) + "\n"


def _slug(text: str) -> str:
    return _SLUG_RE.sub("-", text.lower()).strip("-") or "table"


def paper_tables(result: Any) -> dict[str, pd.DataFrame]:
    """The report's tables for a paper, by title: the comparison's two groups, the method
    leaderboard (when the result has an unlearned model and per-draw values), the verdicts and
    the settings."""
    compared = comparison_table(result.models)
    tables = {
        title: compared[[c for c in columns if c in compared.columns]]
        for title, columns in COMPARISON_GROUPS.items()
    }
    board = leaderboard_table(result.models, result.draws)
    if not board.empty and not result.draws.empty:
        tables["Method leaderboard"] = leaderboard_text(board)
    tables["Verdicts"] = verdict_table(result)
    tables["Settings"] = settings_table(result.settings)
    return tables


def publication_style(fig: go.Figure) -> go.Figure:
    """A copy of ``fig`` sized and lettered for a page (fixed size, larger font, no hover
    hints), its fill patterns drawn as outlines (:func:`print_ready`); colours unchanged."""
    out = print_ready(fig)
    panels = sum(1 for key in out.layout.to_plotly_json() if key.startswith("xaxis"))
    width = max(_WIDTH, _PANEL_WIDTH * panels)  # a multi-panel figure widens, titles apart
    out.update_layout(width=width, height=_HEIGHT, font={"size": _FONT}, hovermode=False)
    return out


def paper_figures(result: Any) -> dict[str, go.Figure]:
    """The report's figures (:func:`report_figures`) in :func:`publication_style`."""
    return {title: publication_style(fig) for title, fig in report_figures(result).items()}


@dataclass(frozen=True)
class PaperBundle:
    """The archive of :func:`paper_bundle`.

    Attributes:
        data: the ZIP bytes. names: the files in it, in order.
        figure_error: why it has no figures (kaleido or Chromium missing), or None.
    """

    data: bytes
    names: tuple[str, ...]
    figure_error: str | None


def paper_bundle(
    result: Any, *, figures: bool = True, formats: Sequence[str] = PAPER_FIGURE_FORMATS
) -> PaperBundle:
    """Every figure (SVG and PDF) and every table (LaTeX and Markdown) of the report in one ZIP,
    with a ``README.txt`` naming each file.

    Without kaleido or Chromium the tables are still written and ``figure_error`` says what to
    install (each chart's camera button still exports it in the browser).

    Args:
        result: the evaluation.
        figures: render the figures (False: tables only).
        formats: the figure formats (:data:`PAPER_FIGURE_FORMATS` by default).
    """
    bad = [f for f in formats if f not in ("png", *PAPER_FIGURE_FORMATS)]
    if bad:
        raise SettingsError(f"figure formats must be among png, svg, pdf; got {bad}")
    files: dict[str, bytes] = {}
    contents = []
    for i, (title, df) in enumerate(paper_tables(result).items(), start=1):
        stem = f"tables/{i:02d}-{_slug(title)}"
        files[f"{stem}.tex"] = table_to_latex(df, caption=title, label=f"tab:{title}").encode()
        files[f"{stem}.md"] = table_to_markdown(df).encode()
        contents.append(f"{stem}.tex / .md: {title} ({len(df)} rows)")
    error = None
    if figures:
        figs = paper_figures(result)
        try:
            images = figures_to_images(figs, formats)
        except ExportError as exc:
            error = str(exc)
        else:
            for i, title in enumerate(figs, start=1):
                stem = f"figures/{i:02d}-{_slug(title)}"
                for fmt in formats:
                    files[f"{stem}.{fmt}"] = images[(title, fmt)]
                contents.append(f"{stem}.{'/.'.join(formats)}: {title}")
    readme = [
        "SDE Explorer: the report's figures and tables for a paper.",
        "Tables need \\usepackage{booktabs}; numbers are formatted as in the dashboard.",
        *(["No figures: " + error] if error else []),
        "",
        *contents,
    ]
    files["README.txt"] = ("\n".join(readme) + "\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return PaperBundle(buffer.getvalue(), tuple(files), error)
