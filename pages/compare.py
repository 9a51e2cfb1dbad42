"""Compare page: every model side by side at the chosen layers, with the Retrain reference.

A layer is evaluated at once only when it is ready (results stored or activations cached for
every model) or cheap; otherwise the page says what it would cost — models × rows to extract,
at a throughput measured on this machine — and waits for a click
(:func:`pages._common.affordable_layers`).

With a precision target (sidebar, method §15) the page first offers the planner: a pilot per
model predicts the draws and seconds, and the evaluation starts on a click.

While an evaluation started elsewhere (the command line, Ray, Slurm, a plan) is storing the
models at the page's settings, the page shows the stored ones, labelled provisional, with the
run's progress, and picks up the others as they arrive instead of evaluating them itself
(:mod:`pages._live`).

Link parameters (besides the settings): ``layers``, ``metric``, ``chart`` (the chart's layer),
``overlay`` (models whose target histograms are overlaid), ``pair`` (the two models of the
paired differences).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from pages._common import guarded, model_layers, open_page, publish
from pages._display import plot, show_verdict, table
from pages._live import live_run, provisional_result
from pages._many import MANY_MODELS, drawn_models, many_models, stored_answer
from pages._paper import paper_export
from pages._run import (
    STOP_KEY,
    affordable_layers,
    evaluate_with,
    evaluation_session,
    request_stop,
    show_stopped,
)
from pages._settings import bound, current_settings
from sde_core.common.hashing import stable_hash
from sde_core.common.markdown_text import md_literal
from sde_core.services.answer import model_family, verdict_notes
from sde_core.services.cascade import (
    EvalSettings,
    EvaluationCancelled,
    EvaluationResult,
    PartialEvaluation,
    StagedWork,
    forecast_models,
    forecast_sentence,
)
from sde_core.services.view_state import CompareView
from sde_core.services.workspace_info import Workspace
from sde_core.viz.answer import paired_table
from sde_core.viz.figures.comparison import BAR_CHOICES, comparison_bars, draw_strip
from sde_core.viz.figures.distributions import target_overlay
from sde_core.viz.figures.leaderboard import SORT_RATE, leaderboard_chart, leaderboard_table
from sde_core.viz.figures.small_multiples import (
    MAX_SMALL_MULTIPLES,
    SMALL_MULTIPLE_VIEWS,
    small_multiples,
)
from sde_core.viz.report.exports import to_csv_bytes
from sde_core.viz.ui_support import comparison_display, comparison_terms, layer_comparison_table
from sde_core.viz.verdicts.explanation import retrain_row


def _compare_progress(names: list[str], settings: EvalSettings) -> Any:
    """The Compare page's runner: a box with the overall and the per-model progress and Stop."""

    def run(work: StagedWork) -> EvaluationResult | None:
        if st.session_state.get(STOP_KEY):
            show_stopped()
            return None
        slot = st.empty()
        box = slot.container(border=True)
        box.caption(f"Evaluating {len(names)} models at layer {md_literal(settings.layer)}…")
        overall = box.progress(0.0, text=f"model 1 of {len(names)}")
        bar = box.progress(0.0, text="loading the activations…")
        box.button("Stop", on_click=request_stop, key=f"stop_compare_{settings.layer}")

        def on_update(part: PartialEvaluation) -> None:
            i = names.index(part.model)
            overall.progress(i / len(names), text=f"model {i + 1} of {len(names)}: {part.model}")
            bar.progress(part.done / part.total, text=f"{part.model}: {part.label}")

        try:
            return work(on_update, lambda: bool(st.session_state.get(STOP_KEY)))
        except EvaluationCancelled:
            show_stopped()
            return None
        finally:
            slot.empty()

    return run


def compare_evaluate(ws: Workspace, settings: EvalSettings) -> EvaluationResult | None:
    """Every model at ``settings`` for the Compare page, with per-model progress and Stop
    (:meth:`~sde_core.services.cascade.Evaluations.compare`: cache, results store, or the
    session's Compare stages). Errors are shown inline.

    Returns:
        The result, or None when evaluation failed (error shown) or was stopped.
    """
    names = [m.name for m in ws.models]
    return evaluate_with(
        ws, settings, names,
        lambda source, run: source.compare(settings, run, _compare_progress(names, settings)),
    )  # fmt: skip


def apply_link(view: CompareView) -> None:
    """The link's layers, chart metric, chart layer, overlaid models and paired models."""
    if view.pair is not None and len(view.pair) == 2:
        st.session_state["c_pair_a"], st.session_state["c_pair_b"] = view.pair
    for name, key in (("layers", "compare_layers"), ("overlay", "c_overlay")):
        chosen = getattr(view, name)
        if chosen is not None:
            st.session_state[key] = list(chosen)
    for name, key in (("metric", "c_metric"), ("chart", "c_layer")):
        text = getattr(view, name)
        if text is not None:
            st.session_state[key] = text


def choose_layers(ws: Workspace) -> list[str]:
    """Layer multiselect (default: the Explore layer)."""
    reference = ws.first("original") or ws.models[0].name
    options = [info.name for info in model_layers(ws, reference)]
    chosen = st.session_state.get("compare_layers")
    if chosen is None:
        st.session_state["compare_layers"] = [st.session_state.get("s_layer", "output")]
    unknown = [x for x in st.session_state["compare_layers"] if x not in options]
    if unknown:
        shown = ", ".join(md_literal(x[:60]) for x in unknown[:10])
        st.warning(
            f"Unknown layers {shown} dropped; the models have "
            f"{', '.join(md_literal(x) for x in options[:6])}…"
        )
        st.session_state["compare_layers"] = [
            x for x in st.session_state["compare_layers"] if x in options
        ]
    return st.multiselect(
        "Layers (OTR, calibrated OTR, F1 and dependence score are per layer)",
        options,
        help="A layer whose activations are not cached yet is evaluated only after you confirm "
        "its cost (one pass of every model over the training and test data).",
        **bound("compare_layers"),
    )


def charts(results: dict[str, EvaluationResult]) -> str:
    """A bar chart of one metric with intervals and the Retrain line; a target overlay.

    Returns:
        The layer the charts show.
    """
    left, right = st.columns(2)
    if st.session_state.get("c_metric") not in BAR_CHOICES:
        st.session_state["c_metric"] = next(iter(BAR_CHOICES))
    metric = left.selectbox(
        "Metric", list(BAR_CHOICES), format_func=BAR_CHOICES.__getitem__, key="c_metric"
    )
    if st.session_state.get("c_layer") not in results:
        st.session_state["c_layer"] = next(iter(results))
    layer = right.selectbox("Layer of the chart", list(results), key="c_layer")
    result = results[layer]
    plot(comparison_bars(result.models, metric), "c_bars")
    names = result.models["name"].tolist()
    if st.session_state.get("c_strip") not in names:
        st.session_state["c_strip"] = names[0]
    strip = st.selectbox(
        "Per-draw values of",
        names,
        key="c_strip",
        help="Each headline number over the B independent reference draws (method §12): the "
        "dots are the draws, the bar the 95% interval.",
    )
    if not result.model_draws(strip).empty:
        plot(draw_strip(result, strip), "c_strip_chart")
    if "c_overlay" not in st.session_state:
        st.session_state["c_overlay"] = [n for n in names if n in ("original", "retrained")][
            :4
        ] or names[:2]
    st.session_state["c_overlay"] = [n for n in st.session_state["c_overlay"] if n in names][:4]
    chosen = st.multiselect(
        "Overlay the target histograms of 2–4 models", names, max_selections=4, key="c_overlay"
    )
    if len(chosen) >= 2:
        plot(target_overlay(result, chosen), "c_overlay_chart")
    else:
        st.info("Select at least two models to overlay their target histograms.")
    side_by_side(result, names)
    return layer


def side_by_side(result: EvaluationResult, names: list[str]) -> None:
    """Small multiples: each chosen model's S_IT, S_OOT and targets in its own panel on shared
    axes, as histograms or ECDFs."""
    with_arrays = result.models_with_arrays()
    drawn = [n for n in names if n in with_arrays]
    if not drawn:
        return
    if "c_multiples" not in st.session_state:
        st.session_state["c_multiples"] = drawn[:MAX_SMALL_MULTIPLES]
    st.session_state["c_multiples"] = [n for n in st.session_state["c_multiples"] if n in drawn]
    left, right, third = st.columns([3, 1, 1])
    chosen = left.multiselect(
        f"Side by side: the full distributions of up to {MAX_SMALL_MULTIPLES} models",
        drawn, max_selections=MAX_SMALL_MULTIPLES, key="c_multiples",
    )  # fmt: skip
    view = right.radio("View", SMALL_MULTIPLE_VIEWS, horizontal=True, key="c_multiples_view")
    shared = third.toggle("Shared axes", value=True, key="c_multiples_shared",
                          help="Off: each panel on its own x range (reads a narrow model's "
                          "shape; panels then no longer compare by position).")  # fmt: skip
    if chosen:
        plot(small_multiples(result, chosen, view=view, shared=shared), "c_multiples_chart")


def verdicts(ws: Workspace, result: EvaluationResult) -> None:
    """Every model's verdict at the chart's layer, with the evidence it rests on."""
    retrain = retrain_row(result.models)
    notes = verdict_notes(ws, result.settings.layer)  # a language model's family note
    st.subheader(f"Verdicts at layer {md_literal(result.settings.layer)}")
    for row in result.models.to_dict("records"):
        show_verdict(row, result.settings.targets, retrain, draws=result.draws,
                     note=notes.get(str(row["name"]), ""))  # fmt: skip


def planned(ws: Workspace, settings: EvalSettings) -> bool:
    """With a precision target: the planner's forecast (a pilot per model, kept in the stage
    cache for the run) and a button to start; True once the user started this run."""
    key = stable_hash(settings.result_key())
    if st.session_state.get("c_precision_go") == key:
        return True
    width = f"±{settings.precision:g}"
    forecasts = st.session_state.get("c_forecast", {}).get(key)
    if forecasts is None:
        st.info(
            f"Precision target {width} at layer {md_literal(settings.layer)}: a pilot of "
            f"{settings.pilot_draws} draws per model predicts the draws and time it takes "
            "(method §15); the run reuses the pilot."
        )
        if not st.button("Plan the run", key=f"c_plan_{settings.layer}"):
            return False
        with st.spinner("Running the pilots…"):
            forecasts = forecast_models(evaluation_session(ws), settings)
        st.session_state["c_forecast"] = {key: forecasts}
    st.info(f"Precision target {width} at layer {md_literal(settings.layer)}: "
            f"{forecast_sentence(forecasts)}.")  # fmt: skip
    if st.button(f"Evaluate at {width}", key=f"c_go_{settings.layer}", type="primary"):
        st.session_state["c_precision_go"] = key
        return True
    return False


def paired(result: EvaluationResult) -> None:
    """Paired differences of any two models on their common draws (method §15)."""
    names = result.models["name"].tolist()
    if len(names) < 2 or result.draws.empty:
        return
    st.subheader("Paired differences")
    roles = dict(zip(result.models["name"], result.models["role"], strict=True))
    for key, role, fallback in (("c_pair_a", "unlearned", 0), ("c_pair_b", "retrained", 1)):
        if st.session_state.get(key) not in names:
            st.session_state[key] = next((n for n in names if roles[n] == role), names[fallback])
    left, right = st.columns(2)
    a = left.selectbox("Model", names, **bound("c_pair_a"))
    b = right.selectbox("minus model", names, **bound("c_pair_b"))
    if a == b:
        st.info("Choose two different models.")
        return
    shown = paired_table(result.models, result.draws, a, b)
    table(shown, "c_paired", columns={"difference": "paired_difference"})
    st.caption(
        f"{a} minus {b}, draw by draw on the same references, panels, targets and splits "
        "(common random numbers), pooled with a paired Student-t interval over the draws both "
        "models ran; the variance they share cancels, so the paired interval is narrower than "
        "two separate evaluations would give (the 'as if unpaired' column)."
    )


def leaderboard(result: EvaluationResult) -> None:
    """Every unlearned model's paired differences to the retrained model and the original,
    closest to retraining first (method §15)."""
    board = leaderboard_table(result.models, result.draws)
    if board.empty or result.draws.empty:
        return
    st.subheader("Method leaderboard")
    plot(leaderboard_chart(board, result.models), "c_leaderboard")
    table(board, "c_leaderboard_table", columns={"difference": "paired_difference"})
    withheld = board.loc[board["why withheld"] != "", ["model", "rate", "vs", "why withheld"]]
    if not withheld.empty:
        st.caption(
            "Withheld (no point drawn): "
            + "; ".join(f"{m} ({rate} − {vs}): {why}" for m, rate, vs, why in withheld.values)
        )
    st.caption(
        "Each unlearned model minus the retrained model and minus the original, draw by draw "
        "on the same references, panels, targets and splits (common random numbers), with the "
        f"paired 95% interval; ranked by the absolute {SORT_RATE.label} difference to "
        "retraining. "
        "'within the uncertainty of retrained' means the paired interval contains 0 (the paired "
        "test does not tell the two apart), not that the two are equal. The behaviour gap's "
        "difference, where the family measures one, is the behaviour check's (method §9)."
    )


view, ws, _ = open_page("compare", CompareView)
st.title("Compare models")
apply_link(view)
layers: list[str] = []
shown_layer = ""
with guarded("Cannot compare the models"):
    layers = choose_layers(ws)
    if not layers:
        st.info("Choose at least one layer.")
    # a layer whose models a running evaluation is storing shows the stored ones (pages._live)
    live = {layer: found for layer in layers
            if (found := live_run(ws, current_settings(ws, layer=layer))) is not None}  # fmt: skip
    rest = [layer for layer in layers if layer not in live]
    ready = affordable_layers(ws, current_settings(ws), rest, "c") if rest else []
    ready = [layer for layer in layers if layer in live or layer in ready]
    results: dict[str, EvaluationResult] = {}
    # at many models the store's headline rows answer the table; the distributions are read
    # for the page of models drawn (many_models)
    summaries: set[str] = set()
    for layer in ready:
        layer_settings = current_settings(ws, layer=layer)
        # what the cache or the results store already holds needs no plan (a shipped store)
        result = None
        if layer in live:
            many = len(ws.models) > MANY_MODELS
            result = provisional_result(ws, layer_settings, live[layer], "c", summary=many)
            if result is None:
                break
            if many:
                summaries.add(layer)
        elif layer_settings.precision > 0 and len(ws.models) > MANY_MODELS:
            result = stored_answer(ws, layer_settings, summary=True)
            if result is not None:
                summaries.add(layer)
        if result is None and layer_settings.precision > 0:
            result = stored_answer(ws, layer_settings)
        if result is None:
            if layer_settings.precision > 0 and not planned(ws, layer_settings):
                break
            result = compare_evaluate(ws, layer_settings)
        if result is None:
            break
        results[layer] = result
    if results and len(results) == len(ready):
        every = {layer: r.models for layer, r in results.items()}
        all_numbers = layer_comparison_table(every)
        if len(next(iter(results.values())).models) > MANY_MODELS:
            visible = many_models(
                ws,
                next(iter(results.values())),
                "c",
                "the table, charts, verdicts and leaderboard below",
            )
            results = {layer: drawn_models(ws, r, visible, layer in summaries)
                       for layer, r in results.items()}  # fmt: skip
        by_layer = {layer: r.models for layer, r in results.items()}

        def retrain_first(roles: pd.Series) -> pd.Series:
            return roles != "retrained"

        shown = comparison_display(by_layer, model_family(ws)).sort_values(
            "role", key=retrain_first, kind="stable"
        )
        numbers = all_numbers.sort_values("role", key=retrain_first, kind="stable")
        retrained = shown.loc[shown["role"] == "retrained", "name"].tolist()
        st.caption(
            f"Reference: the retrained model {retrained[0]!r} (first row); click a column "
            "header to sort, hover it for its definition; the model and its verdict stay in "
            "view while the table scrolls. OTR, accuracies and ASR in % (as in the charts), "
            "F1 and the dependence score on their own scale, time in seconds."
            if retrained
            else "This workspace has no retrained model to compare with."
        )
        pinned = ["name", *(c for c in shown.columns if c.startswith("verdict ["))]
        table(shown, "c_table", columns=comparison_terms(list(shown.columns)), pinned=pinned)
        draws = sorted({int(d) for r in results.values() for d in r.models["draws"]})
        st.caption(
            f"Each value: the point value over B = {'/'.join(map(str, draws))} independent "
            "reference draws with its 95% interval (OTR, calibrated OTR, F1: Korn–Graubard; "
            "dependence score: Fieller, 'unbounded' when it has no bound; method §12). "
            "'withheld': the gate "
            "found that the references do not separate — see 'why inconclusive'."
        )
        st.download_button(
            "Download the numbers (CSV)", to_csv_bytes(numbers), "sde-compare.csv", "text/csv",
            key="c_csv", help="Every number of the table with its interval bounds, NaN = withheld.",
        )  # fmt: skip
        shown_layer = charts(results)
        many = len(every[shown_layer]) > MANY_MODELS
        # at many models the verdict column of the table answers first; each model's
        # verdict text and the page's leaderboard (~0.1 s a model) are drawn on request
        if not many or st.toggle("Verdicts of this page's models, in words", key="c_t_verdicts"):
            verdicts(ws, results[shown_layer])
        paired(results[shown_layer])
        if not many or st.toggle("Method leaderboard of this page's models", key="c_t_board"):
            leaderboard(results[shown_layer])
        paper_export(results[shown_layer], f"{ws.name or ws.root.name}-compare", "c_")
publish(
    CompareView(
        layers=tuple(layers),
        metric=str(st.session_state.get("c_metric", "")),
        chart=shown_layer,
        overlay=tuple(st.session_state.get("c_overlay", [])) if shown_layer else None,
        pair=tuple(st.session_state.get(k, "") for k in ("c_pair_a", "c_pair_b"))
        if shown_layer
        else None,
    )
)
