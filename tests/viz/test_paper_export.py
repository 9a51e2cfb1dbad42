"""The paper archive: every figure as SVG/PDF and every table as LaTeX/Markdown
(:mod:`sde_core.viz.report.paper_export`). The Markdown is read back with an independent
CommonMark parser (markdown-it-py) and the LaTeX un-escaped by a table written here."""

from __future__ import annotations

import html
import io
import re
import zipfile

import pandas as pd
import pytest
from helpers.results import synthetic_result
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from sde_core.viz.figures import export
from sde_core.viz.report import paper_export
from sde_core.viz.report.paper_export import (
    latex_escape,
    paper_bundle,
    paper_figures,
    paper_tables,
    table_to_latex,
    table_to_markdown,
)
from sde_core.viz.report.tables import COMPARISON_GROUPS

_MARKDOWN = MarkdownIt("commonmark").enable("table")
#: LaTeX's own reading of each escape written by the module (a textbook table, not its code).
_UNESCAPE = [
    (r"\textbackslash{}", "\\"),
    (r"\textasciitilde{}", "~"),
    (r"\textasciicircum{}", "^"),
    *[(f"\\{c}", c) for c in "&%$#_{}"],
]
_PRINTABLE = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\u2028\u2029"),
    max_size=40,
)


@pytest.fixture(scope="module")
def result():
    return synthetic_result()


def _unlatex(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        for escape, char in _UNESCAPE:
            if text.startswith(escape, i):
                out.append(char)
                i += len(escape)
                break
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


@settings(max_examples=150, deadline=None)
@given(_PRINTABLE)
def test_latex_escape_prints_the_text_and_leaves_no_special_bare(text):
    ascii_text = "".join(c for c in text if c not in "−σα√–—≤≥±×→≈")
    escaped = latex_escape(ascii_text)
    assert _unlatex(escaped) == " ".join(ascii_text.splitlines())
    bare = escaped
    for escape, _ in _UNESCAPE:
        bare = bare.replace(escape, "")
    assert not set(bare) & set("&%$#_{}~^\\")


def test_latex_table_has_one_row_per_record_and_the_report_symbols_as_math():
    df = pd.DataFrame({"model": ["l1_sparse", "a&b"], "OTR (95% CI)": ["12% (3–25%)", "−0.4"]})
    tex = table_to_latex(df, caption="Headline numbers", label="tab:Headline numbers")
    rows = [line for line in tex.splitlines() if line.endswith(r"\\")]
    assert len(rows) == 3  # header + 2
    assert r"l1\_sparse & 12\% (3--25\%) \\" in tex
    assert r"a\&b & $-$0.4 \\" in tex
    assert r"\label{tab-headline-numbers}" in tex and r"\toprule" in tex


@settings(max_examples=100, deadline=None)
@given(st.lists(_PRINTABLE, min_size=1, max_size=4))
def test_markdown_cells_read_back_literally_and_never_as_links(cells):
    df = pd.DataFrame([cells], columns=[f"c{i}" for i in range(len(cells))])
    rendered = _MARKDOWN.render(table_to_markdown(df))
    assert "<a " not in rendered and "<img" not in rendered
    body = re.search(r"<tbody>(.*)</tbody>", rendered, re.S)
    assert body is not None, rendered
    shown = [html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", body.group(1), re.S)]
    assert shown == [" ".join(c.splitlines()).strip() for c in cells]


def test_paper_tables_are_the_reports_for_reading(result):
    tables = paper_tables(result)
    assert list(tables)[: len(COMPARISON_GROUPS)] == list(COMPARISON_GROUPS)
    assert {"Verdicts", "Settings"} <= set(tables)
    headline = tables["Headline numbers"]
    assert list(headline["model"]) == list(result.models["name"])
    assert not any(c in headline.columns for c in ("otr", "calibrated_otr"))  # labels, not keys


def test_paper_figures_are_sized_for_a_page_and_keep_their_colours(result):
    figures = paper_figures(result)
    originals = paper_export.report_figures(result)
    assert list(figures) == list(originals)
    for title, fig in figures.items():
        assert fig.layout.width >= 720 and fig.layout.height == 440, title
        colours = [getattr(t.marker, "color", None) for t in originals[title].data]
        assert [getattr(t.marker, "color", None) for t in fig.data] == colours, title


def test_bundle_holds_every_table_twice_and_every_figure_in_each_format(result, monkeypatch):
    calls = []

    def fake(figures, formats):
        calls.append((list(figures), tuple(formats)))
        return {(n, f): f"<{f} of {n}>".encode() for n in figures for f in formats}

    monkeypatch.setattr(paper_export, "figures_to_images", fake)
    bundle = paper_bundle(result)
    archive = zipfile.ZipFile(io.BytesIO(bundle.data))
    names = archive.namelist()
    assert tuple(names) == bundle.names and bundle.figure_error is None
    titles = calls[0][0]
    assert titles == list(paper_export.report_figures(result))
    assert calls == [(titles, ("svg", "pdf"))]  # one render call for all figures
    assert sum(n.startswith("figures/") for n in names) == 2 * len(titles)
    tables = paper_tables(result)
    assert sum(n.endswith(".tex") for n in names) == len(tables)
    assert sum(n.endswith(".md") for n in names) == len(tables)
    readme = archive.read("README.txt").decode()
    assert all(title in readme for title in [*tables, *titles])


def test_without_a_renderer_the_tables_still_come_and_the_archive_says_why(result, monkeypatch):
    monkeypatch.setattr(export, "_kaleido_installed", lambda: False)
    bundle = paper_bundle(result)
    assert bundle.figure_error is not None and "kaleido" in bundle.figure_error
    assert not any(n.startswith("figures/") for n in bundle.names)
    assert any(n.endswith(".tex") for n in bundle.names)
    readme = zipfile.ZipFile(io.BytesIO(bundle.data)).read("README.txt").decode()
    assert "No figures: " in readme


def test_bad_figure_format_is_refused_by_name(result):
    with pytest.raises(Exception, match="figure formats"):
        paper_bundle(result, formats=("jpeg",))


@pytest.mark.slow
@pytest.mark.skipif(
    not (export._kaleido_installed() and export.find_chromium()), reason="needs kaleido + Chromium"
)
def test_real_render_writes_vector_files_at_the_layout_size(result):
    figures = {k: v for k, v in list(paper_figures(result).items())[:2]}
    images = export.figures_to_images(figures, ("svg", "pdf"))
    for title, fig in figures.items():
        svg = images[(title, "svg")].decode()
        assert svg.startswith("<svg") and f'width="{fig.layout.width}"' in svg[:300]
        assert images[(title, "pdf")].startswith(b"%PDF-")
