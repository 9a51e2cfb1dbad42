"""One metric vocabulary: a metric's key (``"otr"``, ``"calibrated_otr"``, its ``_lo``/``_hi``
columns …) is spelled in the metric table (sde_core/pipeline/evaluation/metric_table.py) and
in the statistics that compute it (:data:`HOME`), and everything else reads it through the table.

The test is strict: no metric key is written as a string literal anywhere in ``sde_core/`` or
``pages/`` outside :data:`HOME` (read it through ``METRICS`` and the key's name: ``OTR.key`` for
``"otr"``, ``interval_columns``, ``lo_column``, ``raw_column`` …). The shrinking allowance it
started with (296 literals in 24 files) is spent. The only other spellings are
:data:`HOMONYMS`: a named constant of another concept whose value happens to be spelled like a
key (the ``subsets`` kind ``"f1"``), declared once in the module that owns that concept.
"""

from __future__ import annotations

import ast
import importlib
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
#: Another concept spelled like a metric key: ``{file: the module-level constant that names
#: it}``; only that constant's own value may be the literal.
HOMONYMS = {
    # the ``subsets`` kind of the F1 controls (the rows of the f1_h array), in every store
    "sde_core/pipeline/evaluation/model_evaluation.py": "CONTROL_KIND",
    # metrics.json's loss gap of the facts demo: D_te − D_f, the opposite sign of the metric
    "sde_core/pipeline/llm_demo.py": "FACTS_LOSS_GAP",
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


def homonym_values(tree: ast.Module, constant: str) -> set[int]:
    """The ids of the literal nodes that are ``constant``'s own value in ``tree``."""
    out: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        else:
            continue
        if constant in names and isinstance(node.value, ast.Constant):
            out.add(id(node.value))
    return out


def literal_counts(root: Path = REPO) -> Counter[str]:
    """Metric key literals per file of ``sde_core/`` and ``pages/`` (under ``root``) outside
    :data:`HOME`."""
    keys = metric_keys()
    counts: Counter[str] = Counter()
    for top in ("sde_core", "pages"):
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith(HOME):
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            exempt = homonym_values(tree, HOMONYMS[rel]) if rel in HOMONYMS else set()
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and node.value in keys and id(node) not in exempt:
                    counts[rel] += 1
    return counts


def test_no_metric_key_literal_outside_the_metric_table_and_its_statistics():
    """Strict: not one metric key literal in ``sde_core/`` or ``pages/`` outside :data:`HOME`."""
    assert {"otr", "calibrated_otr", "over_unlearned_rate", "otr_lo"} <= metric_keys()
    counts = literal_counts()
    assert not counts, (
        "metric keys spelled outside the metric table (read METRICS and the key's name, "
        f"OTR.key, interval_columns(…), lo_column(…) …): {dict(counts)}"
    )


def test_each_homonym_is_one_constant_spelled_like_a_key():
    """A :data:`HOMONYMS` entry names a constant its module defines once, whose value is
    spelled like a metric key (else the entry is stale: remove it)."""
    for rel, constant in HOMONYMS.items():
        path = REPO / rel
        assert path.exists(), rel
        assert len(homonym_values(ast.parse(path.read_text(encoding="utf-8")), constant)) == 1
        module = importlib.import_module(rel.removesuffix(".py").replace("/", "."))
        assert getattr(module, constant) in metric_keys(), (rel, constant)
        assert constant in module.__all__, (rel, constant)


def test_the_scan_finds_a_literal_and_exempts_only_the_homonym_itself(tmp_path):
    """The scan sees a key in any literal position (dict key, subscript, call argument), in
    a homonym's module too (only the constant's own value is exempt), and never in HOME."""
    files = {
        "pages/probe.py": 'X = {"otr": row["f1_lo"]}\nf("dependence_score")\n',
        "sde_core/pipeline/llm_demo.py": 'FACTS_LOSS_GAP = "loss_gap"\nY = "loss_gap"\n',
        "sde_core/stats/probe.py": 'Z = "otr"\n',
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    assert literal_counts(tmp_path) == {"pages/probe.py": 3, "sde_core/pipeline/llm_demo.py": 1}


def test_each_metric_has_its_key_by_name():
    """The metric table names every metric once (``OTR`` is ``METRICS["otr"]``), so code that
    means one metric reads the name (``OTR.key``, ``OTR.label``) instead of spelling the key."""
    import sde_core.pipeline.evaluation.metric_table as table

    named = {k: getattr(table, k.upper()) for k in METRICS}  # every metric has its name
    assert named == METRICS
    assert table.interval_columns(table.OTR.key) == ("otr", "otr_lo", "otr_hi")
    assert table.raw_column(table.CALIBRATED_OTR.key) == "calibrated_otr_raw"
