"""Every number README.md and REPRODUCTION.md quote for a bundled demo is the shipped store's.

The numbers sit between ``<!-- quoted:… -->`` markers (reproduction/quoted_numbers.py); this
test regenerates each from ``assets/<demo>/results.sqlite`` and fails on any difference, so a
rebuilt store cannot leave stale prose behind.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import ModuleType

import pytest
from helpers.scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
DEMOS = ("demo", "demo-mnist1d", "demo-facts", "demo-fashion-edm", "demo-fashion-edm-mem")


def _load() -> ModuleType:
    return load_script("reproduction/quoted_numbers.py", register=True)


q = _load()


@pytest.mark.parametrize("name", q.DOCUMENTS)
def test_every_quoted_number_is_the_shipped_stores(name: str) -> None:
    text = (ROOT / name).read_text(encoding="utf-8")
    stale = q.stale(text)
    assert not stale, "\n".join(
        f"{key}: quotes {found.strip()!r}, the store gives {want.strip()!r} "
        "(run python reproduction/quoted_numbers.py)"
        for key, found, want in stale
    )


def test_the_docs_quote_every_demo_with_markers() -> None:
    """The check cannot pass vacuously: the demo tables and the LM prose are marked."""
    keys = [k for name in q.DOCUMENTS for k, _ in q.markers((ROOT / name).read_text("utf-8"))]
    for demo in ("demo", "demo-mnist1d", "demo-facts"):
        assert f"table {demo}" in keys
    assert "demo-facts/original/otr" in keys  # the sentence issue 35 found stale
    assert len(keys) >= 30


def test_the_old_readme_sentence_is_caught() -> None:
    """The README sentence of the version-4 store (original OTR 0.10 [0.03, 0.22]) is stale."""
    old = (
        "SDE on `layer.3` says original *<!-- quoted:demo-facts/original/verdict -->not "
        "forgotten<!-- /quoted -->* (OTR <!-- quoted:demo-facts/original/otr -->0.10 "
        "[0.03, 0.22]<!-- /quoted -->, calibrated <!-- quoted:demo-facts/original/"
        "calibrated_otr:point -->0.03<!-- /quoted -->)"
    )
    found = {key: (body, want) for key, body, want in q.stale(old)}
    assert set(found) == {"demo-facts/original/otr", "demo-facts/original/calibrated_otr:point"}
    assert q.render(old) != old
    assert q.stale(q.render(old)) == []


@pytest.mark.parametrize("demo", DEMOS)
def test_quoted_estimates_match_a_plain_reading_of_the_store(demo: str) -> None:
    """Textbook formatting of the stored columns (two decimals, [lo, hi]) gives the same text."""
    run = q.stored_run(demo)
    assert run.models
    for name, row in run.models.items():
        value, lo, hi = (float(row[c]) for c in ("otr", "otr_lo", "otr_hi"))
        text = q.quoted(f"{demo}/{name}/otr")
        if math.isnan(value):
            assert text in ("withheld", "n/a")
        else:
            assert text == f"{value:.2f} [{lo:.2f}, {hi:.2f}]".replace("-", "−")
            assert q.quoted(f"{demo}/{name}/otr:point") == f"{value:.2f}"


@pytest.mark.parametrize(
    "key", ["demo-facts/nobody/otr", "demo-facts/original/no_such_metric", "nowhere/original/otr"]
)
def test_a_marker_naming_nothing_is_an_error(key: str) -> None:
    with pytest.raises(q.QuotedNumberError):
        q.quoted(key)


def test_the_layer_sweep_table_is_its_jsons() -> None:
    """reproduction/results/facts/layers.md is what llm_facts.py makes of the committed JSONs."""
    facts = load_script("reproduction/llm_facts.py")
    folder = ROOT / "reproduction" / "results" / "facts" / "json"
    layers = ("embeddings", "layer.0", "layer.1", "layer.2", "layer.3", "final")
    files = [str(folder / f"sweep_{layer}_{p}.json") for p in ("mean", "last") for layer in layers]
    table = facts.sweep_table(files)
    assert table == (folder.parent / "layers.md").read_text(encoding="utf-8")
    assert "algorithm version 5" in table


def test_reading_the_quoted_numbers_leaves_the_shipped_stores_as_they_are() -> None:
    """The shipped stores are read, never written: a writable open would upgrade an older
    schema in place (it did: this check read them writable until schema 3)."""
    import hashlib

    files = [ROOT / "assets" / demo / "results.sqlite" for demo in DEMOS]
    before = [hashlib.sha256(f.read_bytes()).hexdigest() for f in files]
    q.stored_run.cache_clear()
    for demo in DEMOS:
        assert q.stored_run(demo).models
    assert [hashlib.sha256(f.read_bytes()).hexdigest() for f in files] == before


def test_the_null_check_markers_are_the_stores() -> None:
    """The null-check table and summary (method §9) against a plain reading of the stores, and
    a stale one caught."""
    stale = "<!-- quoted:nulltable demo-facts -->\nold\n<!-- /quoted -->\n"
    stale += "<!-- quoted:nullsummary -->all fine<!-- /quoted -->"
    assert {key for key, _, _ in q.stale(stale)} == {"nulltable demo-facts", "nullsummary"}
    assert q.stale(q.render(stale)) == []
    run = q.stored_run("demo-facts")
    body = q.table("demo-facts", kind="nulltable")
    for name, row in run.models.items():
        line = next(x for x in body.splitlines() if x.startswith(f"| {name} |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1] == str(int(row["draws"])) and cells[2] == str(2 * int(row["null_pairs"]))
        lo, hi = float(row["null_calibrated_fpr_lo"]), float(row["null_calibrated_fpr_hi"])
        assert cells[3] == f"{float(row['null_calibrated_fpr']):.2f} [{lo:.2f}, {hi:.2f}]"
        assert cells[5] == str(int(row["null_train_subsets"]))
    held = 0
    for demo in DEMOS:
        for row in q.stored_run(demo).models.values():
            for rate in (
                "null_calibrated_fpr",
                "null_over_unlearned_fpr",
                "null_out_of_training_fpr",
            ):
                held += float(row[f"{rate}_lo"]) <= 1 / 21 <= float(row[f"{rate}_hi"])
    assert q.null_summary().startswith(f"{held} of the ")


def test_checkpoint_ranges_are_a_plain_reading_of_the_meta_evaluation_table() -> None:
    """``meta_eval_<plan>/checkpoints:<selector>/…`` markers: the range, count and names of the
    selected rows of ``<plan>_checkpoints.csv``, read here with the csv module alone."""
    import csv

    for plan in ("mnist1d", "fashion-mnist"):
        path = ROOT / "reproduction" / "results" / f"meta_eval_{plan}_checkpoints.csv"
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        chosen = [r for r in rows if r["kind"] == "unlearned" and r["method"] in ("rl", "salun")]
        acc = [float(r["truth_forget_accuracy"]) for r in chosen]
        key = f"meta_eval_{plan}/checkpoints:kind=unlearned,method=rl|salun"
        assert q.quoted(f"{key}/truth_forget_accuracy:range1") == (f"{min(acc):.1f}–{max(acc):.1f}")
        assert q.quoted(f"{key}/count") == str(len(chosen)) != "0"
        assert q.quoted(f"{key}/names") == ", ".join(r["checkpoint"] for r in chosen)
        retrained = [r for r in rows if r["kind"] == "retrained"]
        one = retrained[0]["checkpoint"]
        loss = float(retrained[0]["truth_forget_loss"])
        assert (
            q.quoted(f"meta_eval_{plan}/checkpoints:checkpoint={one}/truth_forget_loss:range3")
            == f"{loss:.3f}"
        )  # one row: the number alone


@pytest.mark.parametrize(
    "key",
    [
        "meta_eval_mnist1d/checkpoints:kind=nothing/count",  # no row matches
        "meta_eval_mnist1d/checkpoints:colour=red/count",  # no such column
        "meta_eval_mnist1d/checkpoints:kind/count",  # no value
        "meta_eval_mnist1d/checkpoints:kind=retrained/truth_forget_loss",  # no rangeN
        "meta_eval_mnist1d/checkpoints:kind=retrained/truth_forget_loss:rangex",
        "meta_eval_mnist1d/checkpoints:kind=retrained/no_column:range1",
    ],
)
def test_a_checkpoint_marker_naming_nothing_is_an_error(key: str) -> None:
    with pytest.raises(q.QuotedNumberError):
        q.quoted(key)


def test_a_compared_pair_is_a_textbook_paired_t_on_the_stored_draws() -> None:
    """``compare:<model>:<reference>`` against scipy's paired t on the store's per-draw rates
    (read with sqlite, not the library): equal trials per draw, so the pooled difference is the
    plain mean and the interval ``ttest_rel``'s — widened to the binomial floor of method §15
    where that binds (it does for F1 here, whose per-draw differences hardly vary)."""
    import json
    import sqlite3

    from scipy import stats

    path = ROOT / "assets" / "demo-fashion-edm-mem" / "results.sqlite"
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        (run_id,) = con.execute("select id from runs where status = 'complete'").fetchone()
        rows = con.execute(
            "select t.payload from table_rows t join units u on u.id = t.unit_id "
            "where u.run_id = ? and t.table_name = 'draws'",
            (run_id,),
        ).fetchall()
    finally:
        con.close()
    draws = [json.loads(r[0]) for r in rows]
    checked = 0
    for metric, trials, floor_binds in (("otr", "targets", False), ("f1", "controls", True)):
        a = {d["draw"]: d for d in draws if d["model"] == "retrained"}
        b = {d["draw"]: d for d in draws if d["model"] == "original"}
        common = sorted(set(a) & set(b))
        x = [a[i][metric] for i in common]
        y = [b[i][metric] for i in common]
        assert len({a[i][trials] for i in common}) == 1  # equal trials: unweighted
        m = sum(a[i][trials] for i in common)
        shares = [(sum(v) / len(v) * m + 2) / (m + 4) for v in (x, y)]
        floor = max(p * (1 - p) / m for p in shares)
        d = [u - w for u, w in zip(x, y, strict=True)]
        var = stats.tvar(d) / len(d)
        assert (floor > var) == floor_binds, (metric, var, floor)
        mean = sum(d) / len(d)
        if floor_binds:
            half = stats.t.ppf(0.975, len(d) - 1) * math.sqrt(floor)
            low, high = mean - half, mean + half
        else:
            ci = stats.ttest_rel(x, y).confidence_interval(0.95)
            low, high = ci.low, ci.high

        def pts(v: float) -> str:
            return f"{100 * v:+.0f}".replace("-", "−")

        want = f"{pts(mean)} points [{pts(low)}, {pts(high)}] vs original (paired, {len(d)} draws)"
        assert q.quoted(f"demo-fashion-edm-mem/compare:retrained:original/{metric}") == want
        checked += 1
    assert checked == 2


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("demo-fashion-edm-mem/compare:retrained/otr", "name two models"),
        ("demo-fashion-edm-mem/compare:retrained:nobody/otr", "has no model 'nobody'"),
        ("demo-fashion-edm-mem/compare:retrained:original/acc_f", "is not compared"),
        ("demo-fashion-edm-mem/original/nothing_raw", "unknown field"),
    ],
)
def test_a_compare_or_raw_marker_naming_nothing_is_an_error(key: str, message: str) -> None:
    with pytest.raises(q.QuotedNumberError, match=message):
        q.quoted(key)


def test_a_number_before_the_gate_is_the_stores_raw_column() -> None:
    run = q.stored_run("demo-fashion-edm")
    for name, row in run.models.items():
        assert q.quoted(f"demo-fashion-edm/{name}/otr_raw") == f"{float(row['otr_raw']):.2f}"
        assert math.isnan(float(row["otr"]))  # withheld: only the raw number exists


def test_the_split_level_range_is_every_shipped_models() -> None:
    rates = [
        float(row["null_split_fpr"]) for demo in DEMOS for row in q.stored_run(demo).models.values()
    ]
    assert q.null_split_range() == f"{100 * min(rates):.0f}–{100 * max(rates):.0f}%"
    stale = "fires on <!-- quoted:nullsplitrange -->5–40%<!-- /quoted --> of pairs"
    assert [key for key, _, _ in q.stale(stale)] == ["nullsplitrange"]
    assert q.stale(q.render(stale)) == []


def test_every_marker_in_the_docs_is_read() -> None:
    """A marker none of the script's kinds reads would keep its number however stale (a field
    with a space or a hyphen once slipped past the inline pattern: 25 such markers)."""
    for name in ("README.md", "REPRODUCTION.md"):
        assert q.unread_markers((ROOT / name).read_text(encoding="utf-8")) == []
    text = "<!-- quoted:meta_eval_x/summary.truth/over-unlearned -->3<!-- /quoted -->"
    assert q.unread_markers(text) == []
    assert q.unread_markers("<!-- quoted:nonsense -->3<!-- /quoted -->") == ["nonsense"]


def test_the_precision_field_is_the_state_the_pages_show() -> None:
    """``<demo>/<model>/precision``: method §15's state and widest half-width, as the CLI and
    Explore say it; a model whose join is wider than W reads "not reached" (precision rule 2)."""
    from sde_core.pipeline.evaluation.precision import precision_status

    run = q.stored_run("demo-facts")
    for name, row in run.models.items():
        text = q.quoted(f"demo-facts/{name}/precision")
        status = precision_status(row)
        assert status is not None and text.startswith(status[0])
    assert q.quoted("demo-facts/retrained/precision").startswith("not reached, ±")
