"""Explore page: one model at one layer — verdict, histograms, decisions, calibrated panel.

A view the workspace's results store holds (the shipped demos: their defaults) is read back
(:meth:`~sde_core.services.cascade.Evaluations.stored`): no session is opened, no activation
extracted, no HSIC computed. Otherwise it is progressive: the workspace's
:class:`~sde_core.services.cascade.EvaluationSession` streams
the evaluation stage by stage (method §12), so the first histogram (draw 1's references and
targets) appears before the other draws, the controls and the null check; a progress bar and a
Stop button follow it. Stop keeps what finished (shown with "stopped after k of B draws");
Resume continues from the stage cache. A σ, bins or α change reuses the cached activations
and stages (bins/α: no HSIC is recomputed).

Link parameters (besides the settings): ``model``, ``target`` (one target subset in the
histogram), ``control=1`` (the random-init negative control).
"""

from __future__ import annotations

import functools
import time
from typing import Any

import pandas as pd
import streamlit as st

from pages._common import (
    cached_thumbnails,
    current_workspace,
    dataset_bundle,
    guarded,
    layer_label,
    model_layers,
    open_page,
    publish,
)
from pages._display import fmt, fmt_p, headline_value, metric, pct, plot, show_verdict, table
from pages._run import STOP_KEY, evaluations
from pages._samples import (
    forget_sample_evidence,
    show_completions,
    show_sample_evidence,
    show_target_members,
)
from pages._settings import bound, current_settings, redraw_settings, redraw_slot
from sde_core.common.markdown_text import md_literal, md_plain
from sde_core.errors import SDEError
from sde_core.services.answer import verdict_notes
from sde_core.services.cascade import (
    CALIBRATED_OTR,
    DEPENDENCE_SCORE,
    EXPLORE_STAGES,
    F1,
    OTR,
    OVER_UNLEARNING_P,
    PANEL_P,
    REFERENCE_P,
    EvalSettings,
    EvaluationResult,
    PartialEvaluation,
    precision_status,
)
from sde_core.services.evaluation import (
    progress_note,
    session_result,
    target_texts,
)
from sde_core.services.view_state import ExploreView, restrict
from sde_core.services.workspace_info import Workspace, weak_layer_advice
from sde_core.viz.behaviour_text import behaviour_text
from sde_core.viz.figures.comparison import draw_strip
from sde_core.viz.figures.distributions import (
    hsic_histogram,
    panel_figure,
    signal_grid,
    spread_figure,
)
from sde_core.viz.formatting import format_estimate
from sde_core.viz.verdicts.labels import over_unlearning_meaning
from sde_core.viz.verdicts.null_check import null_check_power, null_check_readings

THUMBNAILS = 16
#: An evaluation that finishes within this many seconds shows no progress box and no redraws.
QUIET_SECONDS = 0.5
#: Later redraws of a streaming evaluation come at most this often. Each costs the page's
#: Python and the browser's chart drawing, and on 2 cores both are taken from the HSIC: at one
#: redraw per 2 s (every chart and table each time) a σ change took 65 s on the page against
#: 31 s in the library (14 redraws of 1.2 s, server side alone).
REDRAW_SECONDS = 10.0
#: What a live (provisional) redraw leaves out until the run completes: it draws the verdict,
#: the headline numbers and the histogram only.
LIVE_LATER = (
    "The per-draw strip, the JSD decision table, the calibrated panel, the spread control and "
    "the null check are drawn when the run completes."
)
#: Session key of the evaluation in progress: ``(key, {model: PartialEvaluation})``.
PARTIAL_KEY = "x_partial"
#: Verdict counts of the calibrated test (the ones a result has are shown).
COUNTS = {
    "n_in_training": "in-training",
    "n_out_of_training": "out-of-training",
    "n_over_unlearned": "over-unlearned",
    "n_inconclusive": "inconclusive",
}
HIST_MODES = ["all targets pooled", "one target subset"]
DECISION_HELP = {
    "D(S, S_IT)": "d_it",
    "D(S, S_OOT)": "d_oot",
    "median H": "h_median",
    "score s(S)": "score",
}


def apply_link(view: ExploreView, names: list[str]) -> None:
    """The link's model (if this workspace has it), target subset and negative control."""
    view, problems = restrict(view, {"model": names})
    for problem in problems:
        st.warning(problem)
    if view.model is not None:
        st.session_state["x_model"] = view.model
    if view.target is not None:
        st.session_state["x_hist_mode"] = HIST_MODES[1]
        st.session_state["x_target"] = view.target
    if view.control is not None:
        st.session_state["x_negative"] = view.control


def pick_model_and_layer(ws: Workspace) -> str:
    """Model selector and layer picker (real layers with their shapes); returns the model."""
    names = [m.name for m in ws.models]
    originals = ws.named("original")
    if st.session_state.get("x_model") not in names:
        st.session_state["x_model"] = originals[0] if originals else names[0]
    left, right = st.columns([1, 2])
    # a plain session key: the choice survives a visit to another page (returning to Explore
    # with nothing changed is answered from the cache, not evaluated again for another model)
    model = left.selectbox("Model", names, **bound("x_model"))
    with guarded(f"Cannot list the layers of {model}"):
        layers = model_layers(ws, model)
        labels = {info.name: layer_label(info) for info in layers}
        if st.session_state.get("s_layer") not in labels:
            if st.session_state.get("s_layer"):
                layer = md_literal(st.session_state["s_layer"])
                st.warning(f"{md_literal(model)} has no layer {layer}.")
            st.session_state["s_layer"] = "output" if "output" in labels else layers[0].name
        right.selectbox(
            "Layer (aliases first, then every module)",
            list(labels),
            format_func=labels.__getitem__,
            help="The activations compared: 'output' = softmax probabilities (the paper's h).",
            **bound("s_layer"),
        )
    return model


def headline(
    result: EvaluationResult, model: str, tag: str, provisional: str = "", strip: bool = True
) -> None:
    """The verdict in words (provisional while the run streams), then the reference check,
    OTR with interval, F1, score and σ — under the verdict, and behind an expander when the
    evidence conflicts (those numbers are then not certified); ``strip``: with the per-draw
    dot strip."""
    row = result.models.set_index("name").loc[model]
    record = {"name": model, **row.to_dict()}
    note = verdict_notes(current_workspace(), result.settings.layer).get(model, "")
    show_verdict(record, result.settings.targets, None, name=False, compare=False,
                 provisional=provisional, note=note)  # fmt: skip
    conflict = row.get("evidence_conflict")
    conflicting = isinstance(conflict, str) and bool(conflict.strip())
    holder = (
        st.expander("The headline numbers — not certified: the evidence conflicts")
        if conflicting
        else st.container()
    )
    with holder:
        numbers(result, row, provisional)
        if strip and not result.model_draws(model).empty:
            plot(draw_strip(result, model), f"x_strip{tag}")


def numbers(result: EvaluationResult, row: pd.Series, provisional: str) -> None:
    """The headline numbers of one model's row."""
    valid = bool(row["references_valid"])
    s = result.settings
    cols = st.columns(5)
    metric(cols[0], "Reference U-test p", fmt_p(row[REFERENCE_P.key]), REFERENCE_P.key)
    conflict = row.get("evidence_conflict")
    certified = valid and not (isinstance(conflict, str) and conflict.strip()) and not provisional
    with cols[0]:
        st.badge(
            "references valid (paper's test)" if valid else "references invalid",
            color="green" if certified else ("gray" if valid else "red"),
            icon=(":material/check:" if certified else None) if valid else ":material/close:",
        )
        split = null_check_readings(row.to_dict(), s.alpha, s.alpha_calibrated)[0]
        if split.passed is not None:
            st.caption(
                f"its measured level: {pct(split.rate)} false alarms at nominal α = {s.alpha:g}"
                + ("" if split.passed else " (fails its null check)")
            )
    draws = int(row["draws"])
    for col, label, key, show, pct_ in (
        (cols[1], "OTR (out-of-training rate)", OTR.key, pct, True),
        (cols[2], "Controlled F1", F1.key, fmt, False),
    ):
        metric(col, label, headline_value(row, key, show), key)
        if row[key] == row[key]:
            shown = format_estimate(row[key], row[f"{key}_lo"], row[f"{key}_hi"], percent=pct_)
            col.caption(f"95% interval over B = {draws} draws: {shown.split(' ', 1)[-1]}")
    metric(cols[3], "Dependence score (diagnostic)",
           headline_value(row, DEPENDENCE_SCORE.key, fmt), DEPENDENCE_SCORE.key)  # fmt: skip
    cols[3].caption("not a verdict: its interval is rarely informative (method §5)")
    metric(cols[4], "σ used", fmt(row["sigma"], 4), "sigma")
    cols[4].caption(f"kernel bandwidth σ · layer {row['layer']}, d = {int(row['dim'])}")
    st.caption(f"Behaviour check (method §9): {behaviour_text(row.to_dict())}.")
    status = None if provisional else precision_status(row.to_dict())
    if status is not None:  # the precision design's target, reached or not and why (§15)
        state, sentence = status
        (st.caption if state == "reached" else st.warning)(
            f"{sentence[0].upper()}{sentence[1:]} (method §15)."
        )
    reason = row.get("inconclusive_reason")
    if isinstance(reason, str) and reason.strip():
        names = {OTR.key: "OTR", CALIBRATED_OTR.key: "calibrated OTR", F1.key: "F1",
                 DEPENDENCE_SCORE.key: "the dependence score"}  # fmt: skip
        hidden = [label for key, label in names.items() if row.get(key) != row.get(key)]
        if hidden:
            st.warning(f"**Withheld**: {reason.strip()} (method §12): {', '.join(hidden)} "
                       "are not shown as numbers.")  # fmt: skip
    if not valid:
        where = weak_layer_advice(current_workspace(), model, str(row["layer"]))
        st.warning(
            f"The paper's split-level reference test does not separate at this layer (median p "
            f"= {fmt_p(row[REFERENCE_P.key])} ≥ α = {result.settings.alpha}), so every decision "
            f"of the paper's rule is **inconclusive**. {where}"
        )


def hist_controls(settings: EvalSettings) -> int | None:
    """The histogram's target selector (drawn once, before the evaluation streams)."""
    shown = st.radio("Targets in the histogram", HIST_MODES, horizontal=True, key="x_hist_mode")
    if shown != HIST_MODES[1]:
        return None
    if int(st.session_state.get("x_target") or 0) >= settings.targets:
        st.session_state["x_target"] = 0
    pick = st.number_input(
        "Target subset", min_value=0, max_value=settings.targets - 1, key="x_target"
    )
    return int(pick)


def histogram(result: EvaluationResult, model: str, pick: int | None) -> Any:
    """The H histogram of the references and the chosen target subset (or all pooled; a
    subset not evaluated yet is said so and the pooled targets are shown)."""
    sub = result.subsets
    evaluated = int(((sub["model"] == model) & (sub["kind"] == "target")).sum())
    if pick is not None and pick >= evaluated:
        st.info(f"Target subset {pick} is not evaluated yet: showing all targets pooled.")
        pick = None
    return hsic_histogram(result, model, "pooled" if pick is None else [pick])


def decisions(result: EvaluationResult, model: str, pick: int | None, tag: str) -> None:
    """Histograms of H and the JSD decision of every target subset evaluated so far."""
    sub = result.subsets
    targets = sub[(sub["model"] == model) & (sub["kind"] == "target")]
    plot(histogram(result, model, pick), f"x_hist{tag}")
    st.markdown("**JSD decision per target subset** (D = Jensen–Shannon divergence, base 2)")
    shown_table = targets[["index", "d_it", "d_oot", "decision", "h_median", "score", "spread"]]
    table(
        shown_table.rename(
            columns={
                "index": "target",
                "d_it": "D(S, S_IT)",
                "d_oot": "D(S, S_OOT)",
                "h_median": "median H",
                "score": "score s(S)",
            }
        ),
        f"x_decisions{tag}",
        columns=DECISION_HELP,
        height=240,
    )


def calibrated(result: EvaluationResult, model: str, tag: str) -> None:
    """The reference panel, calibrated p-values and verdict counts, the over-unlearning test,
    the spread control and the null check."""
    row = result.models.set_index("name").loc[model]
    if "panel_it_h" not in result.model_arrays(model):
        st.info("The calibrated panels of draw 1 are being computed…")
        return
    reason = row.get("inconclusive_reason")
    gated = isinstance(reason, str) and bool(reason.strip())
    counts = [k for k in COUNTS if k in row.index and row[k] == row[k]]
    cols = st.columns(3 + len(counts))
    metric(cols[0], "Panel U-test p", fmt_p(row[PANEL_P.key]), PANEL_P.key)
    metric(cols[1], "Calibrated OTR", headline_value(row, CALIBRATED_OTR.key, pct),
           CALIBRATED_OTR.key)  # fmt: skip
    over = "withheld" if gated else ("yes" if bool(row["over_unlearned"]) else "no")
    metric(cols[2], "Over-unlearned (model test)", over, "over_unlearned")
    if not gated:
        cols[2].caption(f"p = {fmt_p(row[OVER_UNLEARNING_P.key])}")
    for col, key in zip(cols[3:], counts, strict=True):
        metric(col, COUNTS[key], "withheld" if gated else str(int(row[key])), key)
    if bool(row["over_unlearned"]) and not gated:
        st.warning(
            f"**Over-unlearned** (p = {fmt_p(row[OVER_UNLEARNING_P.key])}): the model's outputs "
            "on the forget set are significantly flatter (lower spread) than on data it never "
            "saw — " + over_unlearning_meaning(str(row.get("role", "")))
        )
    conflict = row.get("evidence_conflict")
    if isinstance(conflict, str) and conflict.strip():
        st.error(f"**Conflicting evidence** (method §9): {conflict.strip()}")
    left, right = st.columns(2)
    with left:
        plot(panel_figure(result, model), f"x_panel{tag}")
    with right:
        plot(spread_figure(result, model), f"x_spread{tag}")
        st.caption(
            f"Score–spread correlation r = {fmt(row['score_spread_corr'])}: near 1, the score "
            "tracks how spread out the activations are (method §9) rather than a dependence "
            "between the halves."
        )
    null_check(result, row)
    sub = result.subsets
    targets = sub[(sub["model"] == model) & (sub["kind"] == "target")]
    with st.expander("Calibrated p-values per target"):
        table(
            targets[["index", "score", "spread", "p_in", "p_out", "verdict"]].rename(
                columns={"index": "target"}
            ),
            f"x_calibrated{tag}",
        )


def null_check(result: EvaluationResult, row: pd.Series) -> None:
    """Both tests' false-positive rates on disjoint unseen subsets, with α and pass/fail."""
    s = result.settings
    if int(row["null_pairs"]) == 0:
        st.caption("Null check: not run yet (or too few unseen rows for disjoint pairs).")
        return
    raw = row.get("null_train_subsets")  # absent or NaN in an older store's row
    train = int(raw) if raw is not None and pd.notna(raw) else 0
    st.markdown(f"**Null check** ({int(row['null_pairs'])} pairs of disjoint unseen subsets "
                f"and {train} training subsets, outside the panels; method §9)")  # fmt: skip
    for reading in null_check_readings(row.to_dict(), s.alpha, s.alpha_calibrated):
        icon = ":material/check_circle:" if reading.passed else ":material/error:"
        st.markdown(f"{icon} {reading.text}")
    st.caption(null_check_power(row.to_dict(), s.alpha_calibrated)[1])
    st.caption(
        "The paper's split-level U-test is shown beside the calibrated evidence as the paper "
        "defines it; the rate above is its measured level on this workspace."
    )


def negative_control(result: EvaluationResult, model: str, control: str, tag: str) -> None:
    """The same evaluation under the randomly initialised model, side by side."""
    rows = result.models.set_index("name")
    shown = pd.DataFrame(
        {
            name: {
                "references valid": "yes" if bool(rows.loc[name, "references_valid"]) else "no",
                "reference p": fmt_p(rows.loc[name, REFERENCE_P.key]),
                "OTR": headline_value(rows.loc[name], OTR.key, pct),
                "calibrated OTR": headline_value(rows.loc[name], CALIBRATED_OTR.key, pct),
                "F1": headline_value(rows.loc[name], F1.key, fmt),
            }
            for name in (model, control)
        }
    )
    st.dataframe(shown.astype(str), key=f"x_control_table{tag}")
    plot(hsic_histogram(result, control), f"x_control_hist{tag}")


def show_thumbnails(ws: Workspace, settings: EvalSettings, model: str, target: int) -> None:
    """Inputs of one target subset with the model's predictions (images, or 1-D signals drawn
    as curves), or texts."""
    bundle = dataset_bundle(ws)
    strip = cached_thumbnails(ws, settings, model, target, THUMBNAILS)
    if strip is None:
        samples = target_texts(ws, bundle, settings, target, THUMBNAILS)
        if samples is not None:
            st.markdown(
                f"**Target subset {samples.target}: first {len(samples.indices)} texts** "
                "(rows of the forget set D_f)"
            )
            table = pd.DataFrame({"row of D_tr": samples.indices, "text": samples.texts})
            st.dataframe(table, hide_index=True, key="x_target_texts")
            show_completions(ws, settings, model, samples.target,
                             [int(i) for i in samples.indices])  # fmt: skip
        return
    if strip.denoised is not None and strip.noisy is not None:
        st.markdown(
            f"**Target subset {strip.target}: first {len(strip.indices)} images, the noisy "
            f"inputs of the probe at σ_t = {strip.noise_level:g} and {model}'s denoised images** "
            "(error: mean squared error against the clean image)"
        )
        st.caption("Clean images (rows of the forget set D_f)")
        st.image(list(strip.images), width=72, clamp=True)
        st.caption(f"Noisy inputs of the probe (noise level σ_t = {strip.noise_level:g})")
        st.image(list(strip.noisy), width=72, clamp=True)
        st.caption(f"Denoised by {model} (error under each image)")
        st.image(list(strip.denoised), caption=strip.captions, width=72, clamp=True)
        retrained = ws.first("retrained", other_than=model)
        ref = None if retrained is None else cached_thumbnails(ws, settings, retrained, target,
                                                               THUMBNAILS)  # fmt: skip
        if ref is not None and ref.denoised is not None:  # the yardstick, on the same noisy inputs
            st.caption(
                f"Denoised by {retrained}, the retrained model, which never saw D_f (the same "
                "noisy inputs; a model that forgot should denoise these about as well as it does)"
            )
            st.image(list(ref.denoised), caption=ref.captions, width=72, clamp=True)
        return
    right = f" ({sum(strip.correct)} of {len(strip.correct)} right)" if strip.correct else ""
    st.markdown(
        f"**Target subset {strip.target}: first {len(strip.indices)} inputs, {model}'s "
        f"predictions**{right}"
    )
    if strip.signal:  # 1-D inputs (mnist1d): the signals as curves, wrong ones dashed
        flags = strip.correct or [True] * len(strip.captions)  # no classes: nothing is wrong
        plot(signal_grid(strip.images, strip.captions, flags), "x_signals")
    else:
        st.image(list(strip.images), caption=strip.captions, width=72, clamp=True)


def show(result: EvaluationResult, model: str, control: str | None, pick: int | None,
         tag: str, provisional: str = "", live: bool = False) -> None:  # fmt: skip
    """Everything the page shows of a (possibly partial) result; ``tag`` makes element keys
    unique when the streaming evaluation redraws it; ``provisional`` says what is still
    running (the verdict is then labelled provisional); ``live``: a redraw while the run
    streams — the verdict, headline numbers and histogram only (:data:`LIVE_LATER`)."""
    headline(result, model, tag, provisional, strip=not live)
    st.subheader("Split-half HSIC: references and targets")
    if live:
        plot(histogram(result, model, pick), f"x_hist{tag}")
        st.caption(LIVE_LATER)
        return
    decisions(result, model, pick, tag)
    st.subheader("Calibrated evidence, spread control and null check")
    calibrated(result, model, tag)
    if control and control in set(result.models["name"]):
        st.subheader(f"Negative control: {control}")
        negative_control(result, model, control, tag)


def provisional_state(result: EvaluationResult, model: str, settings: EvalSettings) -> str:
    """What a streamed, unfinished result covers so far (``"draw 2 of 5"``): the verdict's
    provisional label (:class:`~sde_core.viz.verdicts.explanation.VerdictExplanation`)."""
    rows = result.models.set_index("name")
    k = int(rows.loc[model, "draws"]) if model in rows.index else 0
    of = f"up to {settings.max_draws}" if settings.precision > 0 else str(settings.draws)
    return f"draw {k} of {of}"


def _milestone(part: PartialEvaluation, previous: PartialEvaluation | None) -> bool:
    """A step after which the live view may be redrawn: the first, and each end of a stage or
    of a model (``progressive`` also throttles these to one per ``REDRAW_SECONDS``, and always
    draws the first finished draw, marked provisional; the progress bar moves at every step)."""
    if previous is None or previous.model != part.model:
        return True
    return part.complete or part.stage != previous.stage


def _request_stop() -> None:
    st.session_state[STOP_KEY] = True


def _resume() -> None:
    st.session_state[STOP_KEY] = False


def progressive(
    ws: Workspace, settings: EvalSettings, names: list[str], model: str, control: str | None,
    pick: int | None,
) -> EvaluationResult | None:  # fmt: skip
    """Evaluate ``names`` stage by stage, redrawing the page as stages finish.

    Returns:
        The complete result (cached for reruns), the partial result when stopped (with the
        note shown), or None on an error (shown inline).
    """
    try:
        source = evaluations(ws)
    except SDEError as exc:
        st.error(f"Cannot evaluate this workspace: {md_plain(exc)}")
        return None
    ws_hash = source.workspace_hash
    key = source.key("explore", settings, tuple(names))
    done = source.cached("explore", settings, tuple(names))
    if done is None:  # a view the results store holds: read back, nothing computed
        with guarded("Cannot read the stored results (they are computed instead)"):
            done = source.stored(settings, names)
    if done is not None:
        show(done, model, control, pick, "")
        return done
    try:
        session = source.session()
    except SDEError as exc:
        st.error(f"Cannot evaluate this workspace: {exc}")
        return None
    saved = st.session_state.get(PARTIAL_KEY)
    parts: dict[str, PartialEvaluation] = dict(saved[1]) if saved and saved[0] == key else {}
    if st.session_state.get(STOP_KEY):
        return stopped(ws_hash, settings, names, parts, model, control, pick)
    # Nothing is shown for an evaluation the stage cache answers at once (a bins or α change
    # recomputes no HSIC, method §12): the progress box and the live redraws start only once
    # it has run for QUIET_SECONDS, and the box is removed when it ends.
    slot = st.empty()
    live = st.empty()
    bar: Any = None
    start = time.perf_counter()
    previous: PartialEvaluation | None = None
    drawn = start  # when the live view was last redrawn
    shown_draw = False  # whether it has shown a finished draw (references and panels)
    parts = {}
    try:
        for i, part in enumerate(session.stream(names, settings, stages=EXPLORE_STAGES)):
            parts[part.model] = part
            st.session_state[PARTIAL_KEY] = (key, dict(parts))
            first = bar is None and time.perf_counter() - start > QUIET_SECONDS
            if first:
                box = slot.container(border=True)
                box.caption(f"Evaluating {', '.join(names)} at layer {md_literal(settings.layer)}, "
                            "stage by stage…")  # fmt: skip
                bar = box.progress(0.0)
                box.button("Stop", on_click=_request_stop, key="x_stop")
            if bar is not None:
                bar.progress(part.done / part.total, text=f"{part.model}: {part.label}")
                now = time.perf_counter()
                if (
                    part.model == model
                    and not part.complete
                    and (
                        first
                        or (part.stage == "panels" and not shown_draw)
                        or (_milestone(part, previous) and now - drawn >= REDRAW_SECONDS)
                    )
                ):
                    partial = session_result(
                        ws_hash, settings, [p.evaluation() for p in parts.values()]
                    )
                    with live.container():
                        show(partial, model, control, pick, f"_live{i}", live=True,
                             provisional=provisional_state(partial, model, settings))  # fmt: skip
                    drawn = time.perf_counter()
                    shown_draw = shown_draw or part.stage == "panels"
            previous = part
            if st.session_state.get(STOP_KEY):
                break
    except SDEError as exc:
        slot.empty()
        st.error(f"Evaluation failed: {md_plain(exc)}")
        return None
    slot.empty()
    live.empty()
    if (
        st.session_state.get(STOP_KEY)
        or len(parts) < len(names)
        or not all(p.complete for p in parts.values())
    ):
        return stopped(ws_hash, settings, names, parts, model, control, pick)
    result = session_result(ws_hash, settings, [parts[n].evaluation() for n in names])
    source.remember("explore", settings, result, tuple(names))
    st.session_state.pop(PARTIAL_KEY, None)
    show(result, model, control, pick, "")
    return result


def stopped(
    ws_hash: str, settings: EvalSettings, names: list[str],
    parts: dict[str, PartialEvaluation], model: str, control: str | None, pick: int | None,
) -> EvaluationResult | None:  # fmt: skip
    """The stopped evaluation: its note, a Resume button and the partial result."""
    notes = [progress_note(p.evaluation(), settings, EXPLORE_STAGES) for p in parts.values()]
    missing = [n for n in names if n not in parts]
    text = " ".join(n for n in notes if n) or "Stopped before the first draw finished."
    if missing:
        text += f" Not started: {', '.join(missing)}."
    st.info(f"**Stopped.** {text}")
    st.button("Resume", on_click=_resume, type="primary", key="resume_button")
    if model not in parts:
        return None
    result = session_result(ws_hash, settings, [p.evaluation() for p in parts.values()])
    part = parts[model]
    show(result, model, control, pick, "",
         provisional="" if part.complete else f"stopped at {part.label.split(':')[0]}")  # fmt: skip
    return result


@st.fragment
def evidence(ws: Workspace, model: str, control: str | None, target: int | None,
             slot: Any) -> EvaluationResult | None:  # fmt: skip
    """The verdict, charts and tables of the view, with the redraw-only settings (bins, α) in
    the sidebar's ``slot``: changing one of them reruns this fragment only — the model and
    layer pickers, the thumbnails and the rest of the page stay as drawn (issue 33)."""
    redraw_settings(slot)
    settings = current_settings(ws)
    names = [model] + ([control] if control else [])
    result = progressive(ws, settings, names, model, control, target)
    publish(ExploreView(model=model, target=target, control=True if control else None))
    return result


view, ws, _ = open_page("explore", ExploreView, redraw_in_fragment=True)
st.title("Explore one model")
apply_link(view, [m.name for m in ws.models])
model = pick_model_and_layer(ws)
controls = [name for name in ws.named("random") if name != model]
control = None
st.session_state.setdefault("x_negative", False)
if controls and st.toggle(
    f"Negative control: also evaluate the random-init model {controls[0]!r}",
    **bound("x_negative"),
):
    control = controls[0]
settings = current_settings(ws)
target = hist_controls(settings)
result = evidence(ws, model, control, target, redraw_slot())
if result is not None:  # outside the fragment: neither depends on bins or α
    with guarded("Cannot show the target inputs"):
        show_thumbnails(ws, settings, model, target or 0)
    # attributed once per run, when the first of its two sections is open
    per_sample = functools.cache(lambda: forget_sample_evidence(ws, settings, result, model))
    with guarded(f"Cannot list the members of target subset {target or 0}"):
        show_target_members(ws, settings, result, model, target or 0, per_sample)
    with guarded("Cannot attribute the evidence to samples"):
        show_sample_evidence(ws, settings, model, per_sample)
