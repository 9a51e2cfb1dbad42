"""One metric vocabulary: a metric's key (``"otr"``, ``"calibrated_otr"``, its ``_lo``/``_hi``
columns …) is spelled in the metric table (sde_core/pipeline/evaluation/metric_table.py) and
in the statistics that compute it, and everything else reads it through the table.

Today's code still spells keys elsewhere; :data:`ALLOWED` lists, per file, how many literals
are left (296 in 24 files when the test was written). The test fails when a file gains one
(read it through ``METRICS`` and the key's name, ``OTR`` for ``"otr"``) and when a file has
fewer than its allowance (lower the allowance, so the list only shrinks).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from sde_core.pipeline.evaluation import metric_table
from sde_core.pipeline.evaluation.metric_table import METRICS, metric_columns

REPO = Path(__file__).resolve().parent.parent
#: where the keys are declared or computed (no limit)
HOME = (
    "sde_core/pipeline/evaluation/metric_table.py",
    "sde_core/pipeline/evaluation/statistics.py",
    "sde_core/pipeline/evaluation/draw_statistics.py",  # computes each draw's metrics (§3–5, §9)
    "sde_core/pipeline/evaluation/behaviour.py",  # computes the behaviour check's columns (§9)
    "sde_core/stats/",
)
#: literal metric keys left per file (shrink these; never add a file)
ALLOWED = {
    "pages/explore.py": 21,
    "sde_core/pipeline/evaluation/caveats.py": 3,
    "sde_core/pipeline/evaluation/comparisons.py": 4,
    "sde_core/pipeline/evaluation/model_evaluation.py": 1,  # the subsets kind "f1" (was run.py's)
    "sde_core/pipeline/evaluation/near_ties.py": 5,
    "sde_core/pipeline/evaluation/precision.py": 5,
    "sde_core/pipeline/evaluation/summary.py": 38,
    "sde_core/pipeline/evaluation/workspace_run.py": 1,
    "sde_core/pipeline/shipped_store.py": 1,  # the subsets kind "f1" of the f1_h array
    "sde_core/pipeline/llm_demo.py": 1,
    "sde_core/viz/behaviour_text.py": 18,
    "sde_core/viz/glossary.py": 10,
    "sde_core/viz/ui_support.py": 2,
}


def test_each_named_handle_is_its_metric():
    """``OTR`` is ``METRICS["otr"]``: code reads a metric through its handle (``OTR.key``,
    ``OTR.label``), and a handle never names another metric."""
    handles = {
        name: value
        for name, value in vars(metric_table).items()
        if name.isupper() and isinstance(value, metric_table.Metric)
    }
    assert {"OTR", "CALIBRATED_OTR", "F1", "ASR", "ACC_GAP"} <= set(handles)
    for name, metric in handles.items():
        assert METRICS[name.lower()] is metric, name
        assert name in metric_table.__all__, name


def metric_keys() -> set[str]:
    return {column for name in METRICS for column in metric_columns(name)}


def literal_counts() -> Counter[str]:
    keys = metric_keys()
    counts: Counter[str] = Counter()
    for top in ("sde_core", "pages"):
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel.startswith(HOME):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and node.value in keys:
                    counts[rel] += 1
    return counts


def test_no_metric_key_literal_beyond_the_shrinking_allowance():
    assert {"otr", "calibrated_otr", "over_unlearned_rate", "otr_lo"} <= metric_keys()
    counts = literal_counts()
    grown = {f: n for f, n in counts.items() if n > ALLOWED.get(f, 0)}
    assert not grown, f"metric keys spelled outside the metric table (read METRICS, OTR …): {grown}"
    shrunk = {f: counts.get(f, 0) for f, n in ALLOWED.items() if counts.get(f, 0) < n}
    assert not shrunk, f"fewer literals than allowed: lower ALLOWED to {shrunk}"


def test_each_metric_has_its_key_by_name():
    """The metric table names every metric once (``OTR`` is ``METRICS["otr"]``), so code that
    means one metric reads the name (``OTR.key``, ``OTR.label``) instead of spelling the key."""
    import sde_core.pipeline.evaluation.metric_table as table

    named = {k: getattr(table, k.upper()) for k in METRICS}  # every metric has its name
    assert named == METRICS
    assert table.interval_columns(table.OTR.key) == ("otr", "otr_lo", "otr_hi")
    assert table.raw_column(table.CALIBRATED_OTR.key) == "calibrated_otr_raw"
