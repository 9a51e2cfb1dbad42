"""Dashboard tests with Streamlit's AppTest: every page, displayed numbers vs the library, views
carried by links, readable tables on the demo, and bad input shown inline (never a traceback).
Plus the UI-free helpers of sde_core.viz.ui_support."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit import dataframe_util
from streamlit.testing.v1 import AppTest
from ui_fixtures import app_test, fresh_server, warm_server

from sde_core.common.paths import allowed_roots, resolve_in_roots
from sde_core.errors import InputError
from sde_core.pipeline.evaluation.workspace_run import EvaluationResult, evaluate_workspace
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.services.uploads import check_upload
from sde_core.services.workspace_models import guess_role
from sde_core.viz.formatting import format_estimate, format_number
from sde_core.viz.ui_support import parse_int_values, parse_sigma_values
from sde_core.viz.verdicts.explanation import explain_verdict
from sde_core.viz.verdicts.labels import verdict_label

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app.py"
TIMEOUT = 120


@pytest.fixture(scope="module", autouse=True)
def _warm_server() -> Iterator[None]:
    """Every AppTest run goes through app.py's navigation, as on a running server."""
    with warm_server():
        yield


@pytest.fixture(scope="module")
def defaults(ws: Path) -> EvalSettings:
    return EvalSettings.from_mapping(dataclasses.asdict(load_workspace(ws).defaults))


@pytest.fixture(scope="module")
def expected(ws: Path, defaults: EvalSettings) -> EvaluationResult:
    """The library's own numbers for the workspace defaults (no store, no cache)."""
    return evaluate_workspace(ws, defaults)


def app(page: str | None = None, **params: str) -> AppTest:
    """Run the app (on ``page``), opened with the query parameters ``params`` (a link)."""
    at = app_test(APP, TIMEOUT)
    if page:
        at.switch_page(f"pages/{page}.py")
    at.query_params.update(params)
    return at.run()


def no_exception(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def frame(at: AppTest, column: str) -> pd.DataFrame:
    """The first displayed table that has ``column`` (tables carry no keys in AppTest)."""
    for element in at.dataframe:
        if column in element.value.columns:
            return element.value
    raise AssertionError(f"no table with column {column!r}")


def pct(x: float) -> str:
    return f"{100 * x:.0f}%" if x == x else "n/a"


def rate(row: pd.Series) -> str:
    """The OTR as the pages show it: 'withheld' when the gate withholds it (method §12)."""
    return (
        "withheld" if row["otr"] != row["otr"] and row["inconclusive_reason"] else pct(row["otr"])
    )


def p_value(x: float) -> str:
    return format_number(x, digits=2)


def displayed(element) -> pd.DataFrame | None:
    """The text a styled table shows (None for a table shown without number formats)."""
    styler = element.proto.arrow_data.styler
    if not styler.display_values:
        return None
    return dataframe_util.convert_arrow_bytes_to_pandas_df(styler.display_values)


def shared_link(at: AppTest) -> str:
    (code,) = [c.value for c in at.code if "?" in c.value]
    return code


# ---------------------------------------------------------------------------------- Navigation


def test_a_deep_link_is_the_first_request_of_a_fresh_server(ws):
    """A fresh server starts in Streamlit's legacy multipage mode, which would run
    pages/method.py on its own; the pages package ends it and the page runs inside app.py."""
    with fresh_server():
        at = app("method")
    no_exception(at)
    assert any(m.value.startswith("# The method, exactly") for m in at.markdown)
    captions = [c.value for c in at.sidebar.caption]
    assert any(c.startswith("SDE Explorer · sde_core") for c in captions), "app.py's frame ran"


# ------------------------------------------------------------------------------------- Explore


def test_explore_shows_the_library_numbers(ws, expected, defaults):
    at = app("explore")
    no_exception(at)
    assert not at.error
    row = expected.models.set_index("name").loc["original"]
    shown = metrics(at)
    assert shown["Reference U-test p"] == p_value(row["reference_p"])
    assert shown["OTR (out-of-training rate)"] == pct(row["otr"])
    assert shown["Controlled F1"] == format_number(row["f1"])
    assert shown["Dependence score (diagnostic)"] == format_number(row["dependence_score"])
    assert shown["σ used"] == format_number(row["sigma"], digits=4)
    assert shown["Calibrated OTR"] == pct(row["calibrated_otr"])
    assert shown["in-training"] == str(row["n_in_training"])
    assert shown["out-of-training"] == str(row["n_out_of_training"])
    assert shown["inconclusive"] == str(row["n_inconclusive"])
    assert all(m.help and "method §" in m.help for m in at.metric), "every metric is defined"
    decisions = frame(at, "D(S, S_IT)")
    targets = expected.subsets[
        (expected.subsets["model"] == "original") & (expected.subsets["kind"] == "target")
    ]
    np.testing.assert_allclose(decisions["D(S, S_IT)"], targets["d_it"])
    assert list(decisions["decision"]) == list(targets["decision"])
    captions = [c.value for c in at.caption]
    interval = format_estimate(row["otr"], row["otr_lo"], row["otr_hi"], percent=True)
    assert any(interval.split(" ", 1)[1] in c and "B = 5 draws" in c for c in captions)
    verdict = explain_verdict({"name": "original", **row.to_dict()}, 10, None, compare=False)
    assert any(verdict.body in m.value for m in at.markdown), "the verdict with its evidence"
    assert at.get("image"), "image data: a thumbnail strip of the target inputs"
    assert dict(at.query_params)["model"] == "original" and dict(at.query_params)["n"] == "40"
    from sde_core.services.samples import sample_behaviour, sample_evidence_table
    from sde_core.services.workspace_info import load_bundle

    opened = load_workspace(ws)
    library = sample_evidence_table(opened, load_bundle(opened), defaults, expected, "original")
    # the two per-sample sections run only while open: closed, nothing of theirs is drawn
    tables = [e.value for e in at.dataframe]
    assert not [t for t in tables if "evidence" in t.columns]
    assert not {"x_samples_csv", "x_members_csv"} & {b.key for b in at.get("download_button")}
    at.session_state["x_samples_open"] = True
    at.session_state["x_members_open"] = True
    at.run()
    no_exception(at)
    shown = frame(at, "subsets_in")  # the most remembered forget samples first, as the library
    assert list(shown["row"]) == list(library["row"][: len(shown)]) and len(shown) == 20
    assert "x_samples_csv" in {b.key for b in at.get("download_button")}
    rows = list(shown["row"])  # each sample's behaviour under the model, original, retrained
    behaviour = sample_behaviour(opened, load_bundle(opened), defaults,
                                 ["original", "retrained"], rows).set_index("row")  # fmt: skip
    for name in ("original", "retrained"):
        np.testing.assert_allclose(
            shown[f"confidence · {name}"], behaviour.loc[rows, f"confidence · {name}"]
        )
        confidence = shown[f"confidence · {name}"]
        assert ((confidence > 0) & (confidence <= 1)).all()
        np.testing.assert_allclose(shown[f"loss · {name}"], -np.log(confidence))
    # the drill-down of the chosen target subset (0): its members in the subset's order, each
    # with the library's evidence and behaviour
    from sde_core.services.evaluation import target_subsets

    tables = [e.value for e in at.dataframe]
    (members,) = [t for t in tables if "evidence" in t.columns and "subsets_in" not in t.columns]
    assert list(members["row"]) == list(target_subsets(opened, load_bundle(opened), defaults)[0])
    by_row = library.set_index("row")
    np.testing.assert_allclose(members["evidence"], by_row.loc[members["row"], "evidence"])
    np.testing.assert_allclose(members["rank"], by_row.loc[members["row"], "rank"])
    inside = sample_behaviour(opened, load_bundle(opened), defaults, ["original", "retrained"],
                              list(members["row"])).set_index("row")  # fmt: skip
    np.testing.assert_allclose(members["loss · retrained"], inside["loss · retrained"])
    assert "x_members_csv" in {b.key for b in at.get("download_button")}


def test_a_link_reproduces_a_non_default_view(ws, defaults):
    """Model, σ, a target subset and the negative control come from the URL."""
    at = app("explore", model="FT", sigma="0.5", target="3", control="1")
    no_exception(at)
    lib = evaluate_workspace(ws, defaults.with_overrides(sigma=0.5), models=["FT", "random"])
    row = lib.models.set_index("name").loc["FT"]
    shown = metrics(at)
    assert shown["σ used"] == format_number(0.5, digits=4)
    assert shown["OTR (out-of-training rate)"] == pct(row["otr"])
    assert shown["Controlled F1"] == format_number(row["f1"])
    assert at.session_state["x_target"] == 3
    assert frame(at, "random").loc["OTR", "random"] == rate(lib.models.iloc[1])
    link = shared_link(at)
    assert link.startswith("./explore?") and "model=FT" in link and "sigma=0.5" in link
    assert "target=3" in link and "control=1" in link
    params = dict(at.query_params)
    assert params["sigma"] == "0.5" and params["model"] == "FT" and params["target"] == "3"
    # the link's own values stay when the user changes the view afterwards
    at.selectbox(key="w_x_model").set_value("retrained").run()
    assert dict(at.query_params)["model"] == "retrained"
    assert dict(at.query_params)["sigma"] == "0.5"


def _workspace_copy(ws: Path, name: str) -> Path:
    """A copy of the tiny workspace beside it, named ``name``, whose forget set lacks one row
    (so its content hash differs)."""
    from sde_core.inputs.indices import save_index_file

    other = ws.parent / name
    if not other.exists():
        shutil.copytree(ws, other, ignore=shutil.ignore_patterns("results.sqlite*"))
        toml = other / "workspace.toml"
        toml.write_text(toml.read_text().replace('name = "tiny"', f'name = "{name}"', 1))
        forget = np.load(other / "forget.npy")
        save_index_file(other / "forget.npy", np.asarray(forget)[1:])
    return other


def _content_hash(folder: Path) -> str:
    from sde_core.inputs.data import load_dataset
    from sde_core.pipeline.workspace import workspace_hash

    loaded = load_workspace(folder)
    return workspace_hash(loaded, data_fingerprint=load_dataset(loaded.dataset_spec()).fingerprint)


def test_a_link_names_its_workspace_and_a_changed_one_is_flagged(ws):
    """A link made on a non-default workspace opens it on a server whose default differs; a
    link whose content hash is not the workspace's says so and offers the one that matches."""
    other = _workspace_copy(ws, "tiny-other")
    other_hash, tiny_hash = _content_hash(other), _content_hash(ws)
    assert other_hash != tiny_hash
    at = app("explore", ws=str(other), wsh=other_hash[:16], model="FT")
    no_exception(at)
    assert at.session_state["ws_path"] == str(other)
    assert not [w for w in at.warning if "content hash" in w.value]
    assert any("**tiny-other**" in c.value for c in at.caption)
    params = dict(at.query_params)  # the view's own link names the workspace and its hash
    assert params["ws"] == str(other) and params["wsh"] == other_hash[:16]
    # the same folder now holds other files than the link was made on (here: tiny's hash)
    at = app("explore", ws=str(other), wsh=tiny_hash[:16], model="FT")
    no_exception(at)
    (warning,) = [w.value for w in at.warning if "content hash" in w.value]
    assert tiny_hash[:16] in warning and other_hash[:16] in warning and "NOT" in warning
    at.button(key="open_matching_workspace").click().run()
    no_exception(at)
    assert at.session_state["ws_path"] == str(ws)  # the server's workspace that matches
    assert not [w for w in at.warning if "content hash" in w.value]
    assert dict(at.query_params)["wsh"] == tiny_hash[:16]
    assert dict(at.query_params)["model"] == "FT"


def test_bad_link_values_are_named_not_fatal(ws):
    at = app("explore", model="nope", n="ten", sigma="wide", target="x")
    no_exception(at)
    warnings = " ".join(w.value for w in at.warning)
    assert "model `nope`" in warnings and "n=`ten`" in warnings and "sigma=`wide`" in warnings
    assert "target=`x`" in warnings
    assert metrics(at)["OTR (out-of-training rate)"]  # the default view is shown


#: Issue 31's link: in Chromium its wsh rendered a clickable link and fetched the image.
ATTACK = "0000` [Re-login here](http://evil.example/x) ![t](http://127.0.0.1:9/track.png) `"


def _live_markdown(text: str) -> list[str]:
    """What in ``text`` would render as more than text (markdown-it-py, CommonMark): links,
    images, HTML, and plain text that GFM's autolinks would make a link."""
    from markdown_it import MarkdownIt

    found = []
    for block in MarkdownIt("commonmark").parse(text):
        for child in block.children or []:
            if child.type in ("link_open", "image", "html_inline"):
                found.append(child.type)
            if child.type == "text" and (
                "evil.example" in child.content or "127.0.0" in child.content
            ):
                found.append(f"plain text {child.content!r}")
    return found


def test_link_values_are_shown_as_literal_text(ws):
    """Issue 31 item 5: ws, wsh, model, layer, a setting and a parameter's name from a link are
    shown as literal text in every message — no link, no image fetch."""
    at = app(
        "explore",
        ws=str(ws),
        wsh=ATTACK,
        model="[m](http://evil.example/m)",
        layer="![l](http://127.0.0.1:9/l.png)",
        n="[n](http://evil.example/n)",
        **{"[k](http://evil.example/k)": "x" * 5000},
    )
    no_exception(at)
    shown = [m.value for m in [*at.warning, *at.error, *at.caption, *at.info]]
    assert any("[Re-login here](http://evil.example/x)" in v for v in shown), shown
    for part in ("[m](http://evil.example/m)", "![l](http://127.0.0.1:9/l.png)",
                 "[n](http://evil.example/n)", "[k](http://evil.example/k)"):  # fmt: skip
        assert any(part in v for v in shown), (part, shown)
    assert [(v, _live_markdown(v)) for v in shown if _live_markdown(v)] == []
    at = app("explore", ws="/nowhere/[w](http://evil.example/w) ![i](http://127.0.0.1:9/i.png)")
    no_exception(at)
    (error,) = [e.value for e in at.error if "cannot be opened" in e.value]
    assert "evil.example/w" in error and not _live_markdown(error), error
    at = app("explore", ws="a/" * 2048)  # 4,096 characters: was "File name too long"
    no_exception(at)
    (error,) = [e.value for e in at.error if "cannot be opened" in e.value]
    assert "give a shorter path" in error


def test_explore_negative_control_and_other_layer(ws, defaults):
    at = app("explore")
    at.toggle(key="w_x_negative").set_value(True).run()
    no_exception(at)
    control = frame(at, "random")
    ref = evaluate_workspace(ws, defaults, models=["random"]).models.iloc[0]
    assert control.loc["OTR", "random"] == rate(ref)
    at.selectbox(key="w_s_layer").set_value("penultimate").run()
    no_exception(at)
    pen = evaluate_workspace(ws, defaults.with_overrides(layer="penultimate"), models=["original"])
    f1 = pen.models.iloc[0]["f1"]
    # the page shows the library's F1, or "withheld" where the gate withholds it (method §12)
    assert metrics(at)["Controlled F1"] == (format_number(f1) if f1 == f1 else "withheld")
    if f1 != f1:
        assert pen.models.iloc[0]["inconclusive_reason"]


def test_changing_sigma_and_bins_reuses_cached_activations(ws, monkeypatch):
    at = app("explore")  # fills the on-disk activation cache for the default layer

    def no_extraction(*args, **kwargs):
        raise AssertionError("activations were re-extracted")

    monkeypatch.setattr("sde_core.inputs.activations.extract_activations", no_extraction)
    at.radio(key="w_s_sigma_rule").set_value("value").run()
    at.number_input(key="w_s_sigma_value").set_value(0.5).run()
    at.number_input(key="w_s_bins").set_value(12).run()
    no_exception(at)
    assert not at.error
    assert metrics(at)["σ used"] == "0.5000"
    assert dict(at.query_params)["bins"] == "12"


def test_subset_larger_than_the_pool_is_an_inline_error(ws):
    at = app("explore")
    at.number_input(key="w_s_subset_size").set_value(5000).run()
    no_exception(at)
    assert any("subset size 5000 is larger" in e.value for e in at.error)


def test_stop_keeps_the_page_and_resume_continues(ws):
    at = app("explore")
    at.session_state["stop_requested"] = True  # as if Stop was pressed during the next run
    at.number_input(key="w_s_seed").set_value(7).run()
    no_exception(at)
    assert any("Stopped" in i.value for i in at.info)
    at.button(key="resume_button").click().run()
    assert "OTR (out-of-training rate)" in metrics(at)


def test_missing_workspace_is_an_inline_error(ws, monkeypatch, tmp_path):
    monkeypatch.setenv("SDE_WORKSPACE", str(tmp_path / "nowhere"))
    at = app("compare")
    no_exception(at)
    assert any("Cannot open the workspace" in e.value for e in at.error)


# ------------------------------------------------------------------------------------- Compare


@pytest.mark.slow  # ~21 s on 2 cores: a full Compare run (make test-slow, CI)
def test_compare_table_matches_evaluate_workspace(ws, defaults, expected):
    at = app("compare", layers="output,penultimate")
    no_exception(at)
    table = frame(at, "OTR [output]").set_index("name")
    assert table.index[0] == "retrained", "the Retrain reference comes first"
    lib = expected.models.set_index("name")
    for name in lib.index:
        r = lib.loc[name]
        # "value [lo, hi]" over the draws, or "withheld" when the gate withholds it (method §12)
        for column, key, lo, hi, percent in (
            ("OTR", "otr", "otr_lo", "otr_hi", True),
            ("F1", "f1", "f1_lo", "f1_hi", False),
            (
                "over-unlearned share",
                "over_unlearned_rate",
                "over_unlearned_lo",
                "over_unlearned_hi",
                True,
            ),
        ):
            shown = format_estimate(
                r[key], r[lo], r[hi], percent=percent, reason=r["inconclusive_reason"]
            )
            assert table.loc[name, f"{column} [output]"] == shown
        assert table.loc[name, "Acc_f (%)"] == pytest.approx(r["acc_f"])
        assert table.loc[name, "MIA ASR (%)"] == pytest.approx(100 * r["asr"])
        assert table.loc[name, "verdict [output]"] == verdict_label(r)
        assert table.loc[name, "conflicting evidence [output]"] == r["evidence_conflict"]
        assert table.loc[name, "over-unlearned [output]"].split(" ")[0] in ("yes", "no", "withheld")
    pen = evaluate_workspace(ws, defaults.with_overrides(layer="penultimate")).models
    for row in pen.to_dict("records"):
        cal = [row[k] for k in ("calibrated_otr", "calibrated_otr_lo", "calibrated_otr_hi")]
        shown = format_estimate(*cal, percent=True, reason=row["inconclusive_reason"])
        assert table.loc[row["name"], "cal. OTR [penultimate]"] == shown
    assert len(at.get("plotly_chart")) == 5  # bars with the Retrain line, dot strip, overlay,
    # the small multiples, the method leaderboard
    (multiples,) = [
        json.loads(c.proto.spec)
        for c in at.get("plotly_chart")
        if "per model: S_IT" in json.loads(c.proto.spec)["layout"]["title"]["text"]
    ]
    assert len(multiples["data"]) == 3 * len(lib)  # S_IT, S_OOT, targets for every model
    at.radio(key="c_multiples_view").set_value("ecdf").run()
    no_exception(at)
    (ecdf,) = [
        json.loads(c.proto.spec)
        for c in at.get("plotly_chart")
        if "empirical CDFs" in json.loads(c.proto.spec)["layout"]["title"]["text"]
    ]
    assert {t["type"] for t in ecdf["data"]} == {"scatter"}
    assert len(_traces(at, "OTR: per-draw values")) <= 1
    alerts = " ".join(a.value for kind in ("error", "warning", "success", "info")
                      for a in getattr(at, kind))  # fmt: skip
    for row in expected.models.to_dict("records"):  # each verdict's short sentence first
        assert f"**{row['name']} ({row['role']}) — " in alerts
    assert any("paired difference" in m.value for m in at.markdown)  # its evidence, expanded
    assert "layers=output,penultimate" in shared_link(at)
    from sde_core.viz.report.paper_export import paper_bundle

    assert "c_paper_zip" not in {b.key for b in at.get("download_button")}  # built on request
    at.button(key="c_paper").click().run()
    no_exception(at)
    (archive,) = [b for b in at.get("download_button") if b.key == "c_paper_zip"]
    files = len(paper_bundle(expected).names)  # the chart's layer (output): the same models
    assert f"({files} files, ZIP)" in archive.proto.label


def test_compare_defaults_to_one_layer_and_prices_the_others(ws):
    at = app("compare")
    no_exception(at)
    assert at.session_state["compare_layers"] == ["output"]
    assert "OTR [output]" in frame(at, "name").columns
    assert not [c for c in frame(at, "name").columns if "penultimate" in c]


# -------------------------------------------------------------------------------------- Sweeps


def test_sigma_sweep_matches_evaluate_workspace(ws, defaults):
    at = app("sweeps")
    no_exception(at)
    label = at.button(key="sw_run").label  # the forecast before it runs
    assert label.startswith("Run sweep (") and " points to evaluate, " in label, label
    at.button(key="sw_run").click().run()
    no_exception(at)
    table = frame(at, "from_store")
    point = table[(table["model"] == "original")].iloc[-1]
    assert point["value"] == "3*sqrt_dim"  # the default values are rules, √d among them
    lib = evaluate_workspace(ws, defaults.with_overrides(sigma=point["value"]),
                             models=["original"]).models.iloc[0]  # fmt: skip
    assert point["f1"] == pytest.approx(lib["f1"])
    assert point["otr"] == pytest.approx(lib["otr"])
    assert len(at.get("plotly_chart")) == 2
    # each σ is paired with the sidebar's √d on the same draws, and the answer says so
    assert (table["paired_base"] == "sqrt_dim").all()
    text = " ".join(m.value for m in at.markdown)
    assert "Against √d, on the same subsets and splits (the paired F1 difference" in text


def test_checkpoint_sweep_and_bad_values(ws):
    at = app("sweeps")
    at.radio(key="sw_param").set_value("checkpoint").run()
    at.button(key="sw_run").click().run()
    no_exception(at)
    table = frame(at, "from_store")
    assert sorted(table["value"]) == [0.1, 0.2, 0.4, 0.8, 1.0]
    # paired with the final checkpoint on the same draws, and said so
    text = " ".join(m.value for m in at.markdown)
    assert "Against the checkpoint at 100% of training, on the same subsets and splits" in text
    at.radio(key="sw_param").set_value("subset_size").run()
    at.text_input(key="sw_sizes").set_value("10, ten").run()
    no_exception(at)
    assert any("'ten' is not an integer" in e.value for e in at.error)


def test_sweeps_page_shows_plan_results(ws):
    from sde_core.pipeline.plans.driver import run_plan
    from sde_core.pipeline.plans.spec import load_plan
    from sde_core.pipeline.store import ResultsStore

    overrides = ["dataset.options.num_samples=1000", "params.seeds=[0]",
                 "params.forget_ratios=[0.2]", "params.subset_sizes=[48]",
                 'params.layers=["output", "penultimate"]', "train.epochs=2", "eval.splits=10",
                 "eval.targets=4"]  # fmt: skip
    path = ws.parent / "plan-results.sqlite"
    with ResultsStore(path) as store:
        variant = load_plan("table1").variant("default", overrides)
        report = run_plan(variant, ws.parent / "plan-work", store, progress=False)
        stored = store.rows(report.run_id, "points")
    at = app("sweeps")
    at.text_input(key="pl_store").set_value(str(path)).run()
    no_exception(at)
    shown = frame(at, "forget_ratio")
    assert len(shown) == len(stored) == 2
    assert sorted(shown["f1"]) == pytest.approx(sorted(stored["f1"]), nan_ok=True)
    assert len(at.get("plotly_chart")) >= 1  # the plan chart (plus any cached sweep charts)


# -------------------------------------------------------------------------------------- Report


def test_report_verdicts_manifest_and_downloads(ws, expected, monkeypatch):
    from sde_core.viz.figures import export

    monkeypatch.setattr(export, "_kaleido_installed", lambda: False)  # no Chromium started
    at = app("report")
    no_exception(at)
    text = " ".join(m.value for m in at.markdown)
    alerts = " ".join(a.value for kind in ("error", "warning", "success", "info")
                      for a in getattr(at, kind))  # fmt: skip
    for row in expected.models.to_dict("records"):  # the short sentence in the verdict's style
        label = verdict_label(row)
        assert f"**{row['name']} ({row['role']}) — {label[0].upper()}{label[1:]}.**" in alerts
    assert "What this cannot certify" in text and "It cannot establish" in text
    card = "How often is it right? Classifiers, measured on the mnist1d and Fashion-MNIST zoos"
    assert card in text  # method §17
    keys = {b.key for b in at.get("download_button")}
    assert {"r_html", "r_json", "r_zip", "r_csv_models", "r_json_subsets"} <= keys
    assert "The paper's reference check is over-confident" in text
    hashes = frame(at, "SHA-256")
    assert sorted(hashes["model"]) == sorted(expected.models["name"])
    assert all(len(h) == 64 for h in hashes["SHA-256"])
    assert "python -m sde_core verify" in " ".join(c.value for c in at.caption)
    for row in expected.models.to_dict("records"):  # the answers come first, one per model
        assert f"**{row['name']}** ({row['role']}) — **{verdict_label(row)}**" in text
    at.text_input(key="r_purpose").set_value("erasure request #17").run()
    at.text_input(key="r_operator").set_value("the audit team").run()
    no_exception(at)  # the report files are rebuilt with the fields (printed: test_report.py)
    assert "r_html" in {b.key for b in at.get("download_button")}
    assert "r_paper_zip" not in {b.key for b in at.get("download_button")}  # built on request
    at.button(key="r_paper").click().run()
    no_exception(at)
    assert "r_paper_zip" in {b.key for b in at.get("download_button")}
    assert any("Tables only, no figures" in w.value and "kaleido" in w.value for w in at.warning)


# ----------------------------------------------------------------------------------- Workspace


def test_workspace_page_lists_models_and_rejects_escapes(ws):
    at = app("workspace")
    no_exception(at)
    assert any("The workspace is valid: 4 models." in s.value for s in at.success)
    at.text_input(key="open_path").set_value("/etc").run()
    at.button(key="open_folder").click().run()
    assert any("outside the allowed folders" in e.value for e in at.error)
    at.text_input(key="open_path").set_value(f"{ws}/../..").run()
    at.button(key="open_folder").click().run()
    assert any("contains '..'" in e.value for e in at.error)


def _build(at: AppTest, folder: str, checkpoint: tuple[str, bytes], arch: str | None) -> AppTest:
    ws_dir = Path(os.environ["SDE_WORKSPACE"])
    at.text_input(key="b_folder").set_value(folder)
    at.selectbox(key="b_kind").set_value("npz")
    at.text_input(key="b_root").set_value(str(ws_dir / "data.npz"))
    at.file_uploader[0].set_value(
        ("forget.npy", (ws_dir / "forget.npy").read_bytes(), "application/octet-stream")
    )
    at.file_uploader[1].set_value([(*checkpoint, "application/octet-stream")])
    at.run()
    if arch:
        at.selectbox(key="b_model_arch_0").set_value(arch).run()
    at.button(key="b_save").click().run()
    return at


def test_build_a_workspace_from_uploads(ws):
    original = (ws / "models" / "original" / "ckpt_100.safetensors").read_bytes()
    at = _build(app("workspace"), "built", ("original.safetensors", original), None)
    no_exception(at)
    assert any("Saved" in s.value for s in at.success), [e.value for e in at.error]
    built = load_workspace(ws.parent / "built")
    assert [(m.name, m.role, m.arch) for m in built.models] == [("original", "original", "mlp")]


def test_build_reports_bad_files_inline(ws):
    original = (ws / "models" / "original" / "ckpt_100.safetensors").read_bytes()
    at = _build(app("workspace"), "bad-arch", ("orig.safetensors", original), "fmnist_cnn")
    no_exception(at)
    assert any("Model file orig.safetensors" in e.value for e in at.error)
    at = _build(app("workspace"), "bad-file", ("model.pt", b"not a checkpoint"), None)
    no_exception(at)
    assert any("Model file model.pt" in e.value and "NOT executed" in e.value for e in at.error)
    assert not (ws.parent / "bad-file" / "models" / "model.pt").exists(), "rejected files go"
    at = _build(app("workspace"), "../outside", ("model.pt", original), None)
    assert any("contains '..'" in e.value for e in at.error)


# ------------------------------------------------------------------------------ ui_support


def test_allowed_roots_and_path_checks(tmp_path):
    inside, outside = tmp_path / "data", tmp_path / "elsewhere"
    inside.mkdir()
    outside.mkdir()
    roots = allowed_roots({"SDE_DATA_ROOTS": str(inside)}, cwd=tmp_path)
    assert roots == [inside.resolve()]
    assert allowed_roots({}, cwd=tmp_path) == [tmp_path.resolve(), (tmp_path / "assets").resolve()]
    assert resolve_in_roots("x", roots, must_exist=False) == inside.resolve() / "x"
    (inside / "link").symlink_to(outside)
    for bad, match in (("link", "outside"), (str(outside), "outside"), ("a/../b", "'..'"),
                       ("", "empty"), ("missing", "does not exist")):  # fmt: skip
        with pytest.raises(InputError, match=match):
            resolve_in_roots(bad, roots)


def test_upload_checks_and_parsers():
    assert check_upload("../../m odel.pt", 10, (".pt",)) == "m_odel.pt"
    with pytest.raises(InputError, match="upload one of"):
        check_upload("evil.pkl", 10, (".pt",))
    with pytest.raises(InputError, match="limit is 1 MiB"):
        check_upload("big.pt", 2 * 2**20, (".pt",), max_mb=1)
    with pytest.raises(InputError, match="empty"):
        check_upload("zero.pt", 0, (".pt",))
    assert parse_sigma_values("0.5, sqrt_dim ,median") == [0.5, "sqrt_dim", "median"]
    for bad in ("-1", "nan", "wide", ""):
        with pytest.raises(InputError):
            parse_sigma_values(bad)
    assert parse_int_values("100, 200") == [100, 200]
    with pytest.raises(InputError):
        parse_int_values("3")
    assert [guess_role(n) for n in ("h_retrain", "original", "rand_init", "salun")] == [
        "retrained", "original", "random", "unlearned"]  # fmt: skip


# ------------------------------------------------------------------------- the shipped demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the shipped Fashion-MNIST demo (its results store makes the pages instant)."""
    folder = tmp_path_factory.mktemp("demo") / "demo"
    skip = shutil.ignore_patterns(".sde-cache", "*.sqlite-wal", "*.sqlite-shm")
    shutil.copytree(ROOT / "assets" / "demo", folder, ignore=skip)
    return folder


@pytest.mark.parametrize("page", ["explore", "compare"])
def test_demo_tables_never_show_runs_of_identical_rounded_numbers(demo, monkeypatch, page):
    """Values that differ display differently (the demo's H values are all ~35 µ)."""
    monkeypatch.setenv("SDE_WORKSPACE", str(demo))
    monkeypatch.setenv("SDE_DATA_ROOTS", str(demo.parent))
    at = app(page)
    no_exception(at)
    checked = 0
    for element in at.dataframe:
        raw = element.value
        floats = [c for c in raw.columns if pd.api.types.is_float_dtype(raw[c])]
        if not floats:
            continue
        shown = displayed(element)
        assert shown is not None, f"numbers shown without formats: {list(raw.columns)}"
        for column in floats:
            values = raw[column].to_numpy(dtype=float)
            finite = np.isfinite(values)
            text = shown[column].to_numpy()[finite]
            assert len(set(text)) == len(set(values[finite].tolist())), (column, text[:5])
            checked += 1
    assert checked >= 4
    if page == "explore":
        median_h = frame(at, "median H")
        assert displayed(at.dataframe[0]) is not None and median_h["median H"].max() < 1e-3


def _gate(models: pd.DataFrame, reason: str) -> pd.DataFrame:
    """The models table as the gate (method §12) leaves it: headline numbers NaN, a reason."""
    models = models.copy()
    for column in ("otr", "otr_lo", "otr_hi", "calibrated_otr", "f1", "f1_lo", "f1_hi",
                   "dependence_score", "over_unlearning_p"):  # fmt: skip
        models[column] = float("nan")
    models["inconclusive_reason"] = reason
    models["over_unlearned"] = False
    return models


def test_withheld_numbers_show_as_withheld_with_the_reason(ws, monkeypatch):
    """Method §12's gate: NaN headline numbers with a reason are 'withheld', never a number."""
    import sde_core.pipeline.evaluation.session as session_module
    import sde_core.services.evaluation as services

    reason = "the calibrated panels do not separate S_IT from S_OOT (p = 0.41)"
    real_result, real_evaluate = services.session_result, session_module.EvaluationSession.evaluate

    def gated_result(*args, **kwargs):
        result = real_result(*args, **kwargs)
        return dataclasses.replace(result, models=_gate(result.models, reason))

    def gated_evaluate(self, *args, **kwargs):
        result = real_evaluate(self, *args, **kwargs)
        return dataclasses.replace(result, models=_gate(result.models, reason))

    monkeypatch.setattr(services, "session_result", gated_result)
    monkeypatch.setattr(session_module.EvaluationSession, "evaluate", gated_evaluate)
    at = app("explore", seed="11")  # a seed no other test evaluates: not in the result cache
    no_exception(at)
    shown = metrics(at)
    assert shown["OTR (out-of-training rate)"] == "withheld"
    assert shown["Controlled F1"] == "withheld" and shown["Calibrated OTR"] == "withheld"
    assert shown["over-unlearned"] == "withheld" and shown["in-training"] == "withheld"
    assert any(reason in w.value for w in at.warning)
    assert any(i.value.startswith("**Inconclusive.** No verdict for original: ") for i in at.info)
    assert any(m.value.startswith("The calibrated panels") for m in at.markdown)  # the evidence
    strip = _traces(at, "OTR: point value and 95% interval")
    assert strip == [], "a withheld number draws no point value"
    at = app("compare", seed="11")
    no_exception(at)
    table = frame(at, "why inconclusive [output]")
    assert set(table["why inconclusive [output]"]) == {reason}
    assert set(table["verdict [output]"]) == {"inconclusive"}
    assert set(table["OTR [output]"]) == {"withheld"} and set(table["F1 [output]"]) == {"withheld"}


def _traces(at: AppTest, name: str) -> list[dict]:
    """Traces called ``name`` in every plotly chart of the page (typed arrays decoded)."""
    import base64
    import json

    def decode(value):
        if isinstance(value, dict) and "bdata" in value:
            return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        return value

    found = []
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        found += [
            {k: decode(v) for k, v in t.items()} for t in spec["data"] if t.get("name") == name
        ]
    return found


def test_explore_dot_strip_shows_each_draw(ws, expected):
    at = app("explore")
    no_exception(at)
    draws = expected.model_draws("original")
    assert len(draws) == 5
    for label, column in (("OTR", "otr"), ("controlled F1", "f1"),
                          ("dependence score", "dependence_score")):  # fmt: skip
        (dots,) = _traces(at, f"{label}: per-draw values")
        np.testing.assert_allclose(dots["x"], draws[column].to_numpy(float))
    (point,) = _traces(at, "OTR: point value and 95% interval")
    row = expected.models.set_index("name").loc["original"]
    assert point["x"][1] == pytest.approx(row["otr"])
    assert any("B = 5 independent reference draws" in json_text(c) for c in at.get("plotly_chart"))


def json_text(chart) -> str:
    return chart.proto.spec


def test_over_unlearned_is_its_own_verdict_with_its_p_value(ws, monkeypatch):
    import sde_core.services.evaluation as services

    real = services.session_result

    def over(*args, **kwargs):
        result = real(*args, **kwargs)
        models = result.models.copy()
        models["over_unlearned"] = True
        models["over_unlearning_p"] = 1.5e-4
        models["references_valid"] = True  # a model whose evidence is not withheld
        models["inconclusive_reason"] = ""
        for key in ("otr", "otr_lo", "otr_hi"):
            models[key] = models["otr_raw"]
        return dataclasses.replace(result, models=models)

    monkeypatch.setattr(services, "session_result", over)
    at = app("explore", seed="12")
    no_exception(at)
    assert metrics(at)["Over-unlearned (model test)"] == "yes"
    assert any("**Over-unlearned** (p = 1.5e-" in w.value for w in at.warning)
    assert any(w.value.startswith("**Over-unlearned.** ") for w in at.warning)  # short first
    assert any("(p = 1.5e-" in m.value for m in at.markdown)  # the evidence, in its expander


def test_conflicting_evidence_dominates_and_gets_no_green_tick(ws, monkeypatch):
    """Issue 34: conflicting evidence is a warning above everything; the headline numbers are
    behind an expander, and no green 'references valid' tick stands beside it."""
    import sde_core.services.evaluation as services

    real = services.session_result

    def conflict(*args, **kwargs):
        result = real(*args, **kwargs)
        models = result.models.copy()
        models["evidence_conflict"] = "the model still fits D_f: accuracy 100% on D_f vs 40%"
        models["references_valid"] = True
        return dataclasses.replace(result, models=models)

    monkeypatch.setattr(services, "session_result", conflict)
    at = app("explore", seed="16")
    no_exception(at)
    warnings = [w.value for w in at.warning]
    assert warnings and warnings[0].startswith("**Conflicting evidence.** ")
    assert "do not treat it as unlearned" in warnings[0]
    assert not [s for s in at.success], "no success box beside conflicting evidence"
    badges = [m.value for m in at.markdown if "badge[" in m.value]
    assert badges and not [b for b in badges if ":green-badge" in b or "check" in b], badges
    labels = [e.label for e in at.expander]
    assert "The headline numbers — not certified: the evidence conflicts" in labels


def test_an_unfinished_run_labels_its_verdict_provisional(ws, monkeypatch):
    """A run that has not completed (here: stopped after draw 1) shows its verdict as
    provisional, never as final; the streaming redraws pass the same label."""
    import streamlit as st

    import sde_core.pipeline.evaluation.session as session_module

    real = session_module.EvaluationSession.stream

    def stop_after_two(self, *args, **kwargs):
        for i, part in enumerate(real(self, *args, **kwargs)):
            if i == 1:
                st.session_state["stop_requested"] = True
            yield part

    monkeypatch.setattr(session_module.EvaluationSession, "stream", stop_after_two)
    at = app("explore", seed="17")
    no_exception(at)
    verdicts = [i.value for i in at.info if "Provisional (" in i.value]
    assert verdicts and verdicts[0].startswith("**Provisional (stopped at draw 1 of 5): ")
    assert "The verdict may change when the run completes." in verdicts[0]
    monkeypatch.setattr(session_module.EvaluationSession, "stream", real)
    at.button(key="resume_button").click().run()
    no_exception(at)
    assert not [i for i in at.info if "Provisional (" in i.value], "complete: final"


def test_stop_leaves_a_partial_result_and_resume_completes(ws, monkeypatch):
    """Stop after draw 1's references: the first histogram and a 'stopped after' note stay."""
    import streamlit as st

    import sde_core.pipeline.evaluation.session as session_module

    real = session_module.EvaluationSession.stream

    def stop_after_two(self, *args, **kwargs):
        for i, part in enumerate(real(self, *args, **kwargs)):
            if i == 1:  # draw 1's references and panels are done: the user presses Stop
                st.session_state["stop_requested"] = True
            yield part

    monkeypatch.setattr(session_module.EvaluationSession, "stream", stop_after_two)
    at = app("explore", seed="13")
    no_exception(at)
    notes = [i.value for i in at.info if "Stopped" in i.value]
    assert notes and "original: stopped after 1 of 5 draws" in notes[0], notes
    assert "the controlled F1, the null check and the accuracies" in notes[0]
    assert len(_traces(at, "OTR: per-draw values")[0]["x"]) == 1  # one draw so far
    assert frame(at, "D(S, S_IT)").shape[0] == 2  # draw 1's share of the T = 10 targets
    monkeypatch.setattr(session_module.EvaluationSession, "stream", real)
    at.button(key="resume_button").click().run()
    no_exception(at)
    assert not [i for i in at.info if "Stopped" in i.value]
    assert len(_traces(at, "OTR: per-draw values")[0]["x"]) == 5


def test_bins_change_recomputes_no_hsic(ws, monkeypatch):
    at = app("explore", seed="14")
    no_exception(at)

    def no_hsic(*args, **kwargs):
        raise AssertionError("H was recomputed for a bins change")

    monkeypatch.setattr("sde_core.pipeline.evaluation.run.compute_h", no_hsic)
    at.number_input(key="w_s_bins").set_value(9).run()
    no_exception(at)
    assert "OTR (out-of-training rate)" in metrics(at)
    # the progress box (its caption, bar and Stop button) is gone once the evaluation is done
    assert not [b for b in at.button if b.key == "x_stop"] and not at.get("progress")
    assert not [c for c in at.caption if c.value.startswith("Evaluating ")]


def test_compare_second_visit_is_served_without_recomputation(ws, monkeypatch):
    at = app("compare", seed="15")
    no_exception(at)
    first = frame(at, "OTR [output]")

    def no_hsic(*args, **kwargs):
        raise AssertionError("H was recomputed on a second visit")

    monkeypatch.setattr("sde_core.pipeline.evaluation.run.compute_h", no_hsic)
    again = app("compare", seed="15")  # a new browser session, the same server process
    no_exception(again)
    pd.testing.assert_frame_equal(frame(again, "OTR [output]"), first)
    assert frame(again, "name")["name"].iloc[0] == "retrained"


def test_a_cold_explore_answers_from_the_results_store(ws, defaults, monkeypatch):
    """A view the results store holds is read back: the page opens with an empty result
    cache and an interactive session that may not evaluate anything (method §12's stages
    would extract activations and compute HSIC), and shows the stored numbers."""
    import sde_core.services.cascade as cascade
    from sde_core.pipeline.evaluation.session import EvaluationSession
    from sde_core.pipeline.store import ResultsStore, workspace_store_path
    from sde_core.services.result_cache import ResultCache

    with ResultsStore(workspace_store_path(ws)) as store:
        stored = evaluate_workspace(ws, defaults, store=store)

    def no_evaluation(*args, **kwargs):
        raise AssertionError("a stored view was evaluated")

    monkeypatch.setattr(cascade, "_PROCESS_CACHE", ResultCache())
    monkeypatch.setattr(EvaluationSession, "stream", no_evaluation)
    monkeypatch.setattr(EvaluationSession, "evaluate", no_evaluation)
    at = app("explore")
    no_exception(at)
    assert not at.error
    row = stored.models.set_index("name").loc["original"]
    shown = metrics(at)
    assert shown["OTR (out-of-training rate)"] == pct(row["otr"])
    assert shown["Calibrated OTR"] == pct(row["calibrated_otr"])
    assert not any("Provisional" in m.value for m in [*at.markdown, *at.info])
