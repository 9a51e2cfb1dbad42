"""Verdict sentences, the self-contained HTML report and the export tables."""

from __future__ import annotations

import io
import json
import zipfile
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest
from helpers.results import synthetic_result

from sde_core import __version__
from sde_core.errors import SettingsError
from sde_core.stats.proportions import wilson_interval
from sde_core.viz.formatting import format_interval
from sde_core.viz.report.caveats import CAVEATS
from sde_core.viz.report.document import report_document, report_from_html
from sde_core.viz.report.exports import (
    tables_for_export,
    tables_to_zip,
    to_csv_bytes,
    to_json_bytes,
)
from sde_core.viz.report.html_page import REPORT_SECTIONS, build_html_report
from sde_core.viz.report.tables import comparison_table, null_calibration_text
from sde_core.viz.verdicts.explanation import explain_verdict, verdict_sentence, verdict_table
from sde_core.viz.verdicts.labels import verdict_label
from sde_core.viz.verdicts.null_check import null_check_power


def row(name: str, role: str, k_out: int, t: int = 100, valid: bool = True, **extra) -> dict:
    """A ``models`` row with OTR = k_out / t and its Wilson interval."""
    lo, hi = wilson_interval(k_out, t)
    values = {
        "name": name,
        "role": role,
        "method": "",
        "references_valid": valid,
        "reference_p": 1e-6 if valid else 0.3,
        "otr": k_out / t,
        "otr_lo": lo,
        "otr_hi": hi,
        "panel_valid": True,
        "panel_p": 1e-4,
        "calibrated_otr": k_out / t,
        "n_in_training": t - k_out,
        "n_out_of_training": k_out,
        "n_inconclusive": 0,
    }
    return values | extra


RETRAIN = row("retrain", "retrained", 92)


def draws_of(**per_model: list[float]) -> pd.DataFrame:
    """A ``draws`` table: each model's OTR per draw (T = 100 targets each)."""
    return pd.DataFrame(
        [{"model": name, "draw": b, "otr": v, "targets": 100, "controls": 100}
         for name, values in per_model.items() for b, v in enumerate(values)]
    )  # fmt: skip


def test_remembered_sentence_names_test_p_value_interval_and_limits():
    draws = draws_of(original=[0.02, 0.03, 0.04, 0.03, 0.03], retrain=[0.9, 0.93, 0.92, 0.91, 0.94])
    explained = explain_verdict(row("original", "original", 3), 100, RETRAIN, draws=draws)
    assert explained.label == "not forgotten"
    assert explained.headline == "Not forgotten"
    assert explained.evidence == (
        "Under the paper's test (split-half HSIC with the Jensen–Shannon rule; "
        "references valid by the paper's U-test, p = 1.0e-6), 97 of 100 subsets of the "
        "forget set still look like training data (OTR 3%, 95% interval over the draws "
        "1–8%): the model has NOT forgotten them."
    )
    assert "97 training-like" in explained.calibrated
    assert "panel U-test p = 1.0e-4" in explained.calibrated
    assert "calibrated OTR 3%" in explained.calibrated
    assert "retrain (the gold standard) has OTR 92% (95% interval 85–96%)" in explained.comparison
    assert "lower, so it forgets less than retraining" in explained.comparison
    assert "paired difference −89 points" in explained.comparison
    assert explained.limits.startswith("What this cannot certify:")
    text = verdict_sentence(row("original", "original", 3), 100, RETRAIN, draws=draws)
    assert text == explained.text and text.startswith(f"Not forgotten. {explained.evidence}")


def test_forgotten_sentence_compares_with_retrain_and_says_no_trace_is_no_proof():
    draws = draws_of(salun=[0.9, 0.93, 0.9, 0.91, 0.91], retrain=[0.92, 0.91, 0.93, 0.9, 0.94])
    explained = explain_verdict(row("salun", "unlearned", 91), 100, RETRAIN, draws=draws)
    assert explained.text.startswith("Consistent with forgetting. Under the paper's test")
    assert "91 of 100 subsets of the forget set look like unseen data" in explained.evidence
    assert "(OTR 91%, 95% interval over the draws 84–95%)" in explained.evidence
    assert "within the uncertainty" in explained.comparison
    assert "that the forget set was erased" in explained.limits


def test_within_the_uncertainty_of_retraining_only_when_the_paired_interval_includes_0():
    """Overlapping intervals are not enough (issue 34: Fashion-MNIST RL and SalUn): a model
    consistently 12 points below the retrained one in every draw differs from it, whatever its
    interval; without the draws no direction is claimed."""
    rl = row("rl", "unlearned", 80) | {"otr_lo": 0.6, "otr_hi": 0.95}
    assert rl["otr_lo"] < RETRAIN["otr_hi"] and RETRAIN["otr_lo"] < rl["otr_hi"]  # overlap
    draws = draws_of(rl=[0.8, 0.79, 0.82, 0.78, 0.81], retrain=[0.92, 0.91, 0.94, 0.9, 0.93])
    text = explain_verdict(rl, 100, RETRAIN, draws=draws).comparison
    assert "within the uncertainty" not in text
    assert "lower, so it forgets less than retraining" in text
    unpaired = explain_verdict(rl, 100, RETRAIN).comparison
    assert "within the uncertainty" not in unpaired and "overlapping intervals alone" in unpaired


def test_a_provisional_verdict_says_so_and_conflicting_evidence_is_a_warning():
    explained = explain_verdict(row("rl", "unlearned", 100, over_unlearned=True), 100,
                                provisional="draw 4 of 5")  # fmt: skip
    assert explained.headline == "Provisional (draw 4 of 5): over-unlearned"
    assert explained.style == "info"
    conflict = row("rl", "unlearned", 100, evidence_conflict="the model still fits D_f")
    final = explain_verdict(conflict, 100)
    assert final.headline == "Conflicting evidence" and final.style == "warning"
    assert "do not treat it as unlearned" in final.short
    assert verdict_label(row("salun", "unlearned", 91)) == "consistent with forgetting"


def test_inconclusive_sentence_says_what_to_try():
    text = verdict_sentence(row("ft", "unlearned", 40, valid=False), 100, RETRAIN)
    assert text.startswith("Inconclusive. The paper's reference test")
    assert "(p = 3.0e-1, not below α)" not in text  # p-values in [1e-3, 1e5) are plain
    assert "(p = 0.30, not below α)" in text
    assert "try another layer, σ, a larger n or more splits" in text
    assert "OTR" not in text.split(".")[0]


def test_gated_row_is_inconclusive_with_its_reason():
    """Method §12: NaN headline numbers with a reason are shown as inconclusive, not numbers."""
    gated = row("ga", "unlearned", 50) | {
        "otr": float("nan"),
        "otr_lo": float("nan"),
        "otr_hi": float("nan"),
        "calibrated_otr": float("nan"),
        "inconclusive_reason": "the calibrated panels do not separate S_IT from S_OOT (p = 0.4)",
    }
    explained = explain_verdict(gated, 100, RETRAIN)
    assert explained.label == "inconclusive"
    assert explained.text.startswith(
        "Inconclusive. The calibrated panels do not separate S_IT from S_OOT (p = 0.4): the "
        "headline numbers are withheld."
    )
    assert "nan" not in explained.text.lower()
    assert "calibrated OTR withheld" in explained.calibrated


def test_missing_columns_and_over_unlearned_counts():
    """Rows of older evaluations lack columns; newer ones count over-unlearned targets."""
    bare = {"name": "x", "role": "unlearned", "references_valid": True, "reference_p": 1e-5,
            "otr": 0.9, "otr_lo": 0.8, "otr_hi": 0.95}  # fmt: skip
    explained = explain_verdict(bare, 20)
    assert explained.label == "consistent with forgetting" and explained.calibrated == ""
    over = row("ga", "unlearned", 60, n_over_unlearned=25, n_inconclusive=15)
    text = explain_verdict(over, 100, RETRAIN).calibrated
    assert "25 over-unlearned" in text and "flatter, lower-spread outputs" in text
    assert "not counted as forgotten" in text


def test_missing_retrain_and_mixed_evidence():
    text = verdict_sentence(row("rl", "unlearned", 10, t=20), 20)
    assert "10 of 20 subsets of the forget set look like unseen data and 10 like training" in text
    assert text.startswith("Mixed.")
    assert "no retrained model to compare with" in text
    assert verdict_label(row("rl", "unlearned", 10, t=20)) == "mixed"


def test_calibrated_part_flags_disagreement_and_invalid_panels():
    disagree = row("ga", "unlearned", 5, n_in_training=10, n_out_of_training=60, n_inconclusive=30)
    assert "The two tests disagree" in verdict_sentence(disagree, 100, RETRAIN)
    invalid = row("ga", "unlearned", 95, panel_valid=False, panel_p=0.4)
    text = verdict_sentence(invalid, 100, RETRAIN)
    assert "do not separate training from unseen data (panel U-test p = 0.40)" in text


def test_role_specific_sentences():
    assert "gold standard the other models" in verdict_sentence(RETRAIN, 100, RETRAIN)
    assert "negative control" in verdict_sentence(row("rand", "random", 50), 100, RETRAIN)
    with pytest.raises(SettingsError):
        verdict_sentence(RETRAIN, 0)


def test_caveats_cover_spec_section_9():
    text = " ".join(CAVEATS.values()).lower()
    for needle in ("split", "false", "spread", "softmax", "penultimate", "randomly initialised"):
        assert needle in text


@pytest.fixture(scope="module")
def result():
    return synthetic_result()


class _Collector(HTMLParser):
    """Collects tags, external references and text of an HTML document."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.refs: list[str] = []
        self.scripts = 0
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.scripts += tag == "script"
        self.refs += [v for k, v in attrs if k in ("src", "href") and v]

    def handle_data(self, data):
        self.text.append(data)


def test_html_report_is_self_contained_and_complete(result):
    doc = build_html_report(result, "tiny <ws>", notes="Seen on <b>Monday</b>.\n\nSecond.")
    parser = _Collector()
    parser.feed(doc)
    parser.close()
    text = " ".join(parser.text)
    assert not [r for r in parser.refs if r.startswith(("http://", "https://", "//"))]
    assert "plotly.js v" in doc and len(doc) > 3_000_000  # the library itself is inlined
    assert doc.count("plotly.js v") == 1  # ...once
    assert parser.tags.count("h1") == 1 and "SDE report: tiny <ws>" in text
    for name in result.models["name"]:
        assert name in text
    for key, value in result.settings.result_key().items():
        assert key in text and str(value) in text
    for title in CAVEATS:
        assert title in text
    assert f"sde_core {__version__}" in text and "UTC" in text
    assert "Null calibration" in text and "Seen on <b>Monday</b>." in text  # escaped, shown
    assert "<b>Monday" not in doc
    assert "NOT forgotten" in text and "consistent with forgetting" in text
    assert parser.scripts >= 4  # plotly.js + one per default chart


def test_html_report_with_given_figures(result):
    doc = build_html_report(result, "ws", figures=[], notes=None)
    assert "No charts." in doc and "plotly.js v" not in doc


def test_verdict_and_comparison_tables(result):
    verdicts = verdict_table(result).set_index("name")
    assert verdicts.loc["original", "verdict"] == "not forgotten"
    assert verdicts.loc["retrain", "verdict"] == "consistent with forgetting"
    assert "20 of 20 subsets of the forget set" in verdicts.loc["original", "explanation"]
    table = comparison_table(result.models).set_index("model")
    original = result.models.set_index("name").loc["original"]
    assert original["otr"] == 0.0 and original["otr_hi"] > 0.1  # Korn–Graubard over draws
    interval = format_interval(original["otr_lo"], original["otr_hi"])
    assert table.loc["original", "OTR (95% CI)"] == f"0% ({interval})"
    assert table.loc["rand", "calibrated OTR (95% CI)"] == "n/a (panels invalid)"
    text = null_calibration_text(result)
    assert "6 pairs" in text and "Its power" in text  # every model's check, with its power
    powers = [null_check_power(r, 0.05)[0] for r in result.models.to_dict("records")]
    assert all(0.0 <= x < 0.5 for x in powers)  # 6 pairs over the fixed design: weak


def test_the_null_check_states_its_power():
    """null_check_power: the simulated power of the row's own check (method §9), in words."""
    sized, power = null_check_power({"null_pairs": 500, "draws": 20}, 0.05)
    assert 0.88 <= sized <= 0.96 and "over B = 20 draws" in power and "weak" not in power
    weak, said = null_check_power({"null_pairs": 500, "draws": 10}, 0.05)
    assert 0.58 <= weak <= 0.72 and "1000 unseen subsets" in said
    assert "more draws, not more subsets" in said
    assert null_check_power({"null_pairs": 0, "draws": 10}, 0.05)[1] == ""


def _cell(value: object) -> str:
    return "" if value is None or value == "" or pd.isna(value) else str(value)


def test_export_tables_round_trip_through_csv_and_json(result):
    tables = tables_for_export(result, include_h=True)
    assert set(tables) == {"models", "subsets", "verdicts", "settings", "h_values"}
    for name, df in tables.items():
        # only empty fields are missing (a subset kind "null" is a word, not a missing value)
        back = pd.read_csv(io.BytesIO(to_csv_bytes(df)), keep_default_na=False, na_values=[""])
        assert list(back.columns) == list(df.columns) and len(back) == len(df)
        for col in df.columns:
            if pd.api.types.is_numeric_dtype(df[col]) and not pd.api.types.is_bool_dtype(df[col]):
                np.testing.assert_array_equal(back[col].to_numpy(float), df[col].to_numpy(float))
            else:
                # CSV has no missing-vs-empty distinction: compare both as "".
                assert back[col].map(_cell).tolist() == df[col].map(_cell).tolist(), (name, col)
    records = json.loads(to_json_bytes(tables["models"]))
    assert [r["name"] for r in records] == result.models["name"].tolist()
    assert records[3]["calibrated_otr"] is None  # NaN -> null
    assert records[0]["reference_p"] == result.models["reference_p"].iloc[0]
    h = tables["h_values"]
    assert len(h) == sum(a.size for a in result.arrays.values())
    targets = h[(h["model"] == "ga") & (h["array"] == "targets_h")]
    np.testing.assert_array_equal(
        targets.pivot(index="subset", columns="split", values="h").to_numpy(),
        result.arrays["ga/targets_h"],
    )


def test_tables_to_zip(result):
    tables = tables_for_export(result)
    with zipfile.ZipFile(io.BytesIO(tables_to_zip(tables, "json"))) as archive:
        assert sorted(archive.namelist()) == sorted(f"{n}.json" for n in tables)
        settings = json.loads(archive.read("settings.json"))
    assert {"setting": "subset_size", "value": "60"} in settings
    with pytest.raises(SettingsError, match="format"):
        tables_to_zip(tables, "xlsx")


def test_html_report_embeds_its_document_and_has_every_section(result):
    manifest = {
        "created": "2026-01-01T00:00:00+00:00",
        "workspace": {"name": "syn", "path": "/data/</script><b>", "hash": "abc"},
        "data": {"fingerprint": "f" * 64, "n_train": 1200, "n_test": 800, "spec": {"kind": "npz"}},
        "forget_set": {"size": 300, "path": "forget.npy", "indices_sha256": "e" * 64},
        "models": {"original": {"role": "original", "sha256": "a" * 64, "matches_recorded": True}},
        "environment": {"python": "3.11", "packages": {"numpy": "2.0"}},
        "timing": {"evaluation_wall_seconds": 12.5},
    }
    doc = build_html_report(result, "syn", figures=[], manifest=manifest, file_hint="r.html")
    for title in REPORT_SECTIONS:
        assert f"<h2>{title}</h2>" in doc
    assert "python -m sde_core verify r.html" in doc
    assert "a" * 64 in doc and "f" * 64 in doc and "12.5" in doc
    assert "/data/</script><b>" not in doc  # escaped in the tables and in the embedded JSON
    back = report_from_html(doc)
    assert back == json.loads(json.dumps(report_document(result, manifest)))
    assert back["format"] == "sde-report" and back["manifest"]["workspace"]["path"].endswith("<b>")
    assert back["models"]["original"]["verdict"] == "not forgotten"
    assert back["models"]["rand"]["calibrated_otr"] is None  # NaN -> null
    with pytest.raises(SettingsError, match="holds no SDE report"):
        report_from_html("<html></html>")
    unpinned = build_html_report(result, "syn", figures=[])
    assert "cannot be verified" in unpinned and report_from_html(unpinned)["manifest"] is None
    # the "how often is it right" card of the models' family (the manifest names their arch)
    card = "How often is it right? Classifiers, measured on the mnist1d and Fashion-MNIST zoos"
    assert card in doc
    assert "was right on" in doc
    language = {**manifest, "models": {"original": {**manifest["models"]["original"],
                                                    "arch": "hf"}}}  # fmt: skip
    lm = build_html_report(result, "syn", figures=[], manifest=language, file_hint="r.html")
    assert "How often is it right? Not measured for a causal language model" in lm
    assert "was right on" not in lm
    assert "How often is it right" not in unpinned  # no manifest: no family to speak of


def test_pdf_without_chromium_says_what_to_do(tmp_path, monkeypatch):
    from sde_core.errors import ExportError
    from sde_core.viz import pdf

    page = tmp_path / "r.html"
    page.write_text("<html><body><h1>x</h1></body></html>")
    monkeypatch.setattr(pdf, "find_chromium", lambda: None)
    with pytest.raises(ExportError, match=r"needs Chromium.*apt-get install chromium"):
        pdf.html_to_pdf(page, tmp_path / "r.pdf")
    assert not (tmp_path / "r.pdf").exists()
    with pytest.raises(ExportError, match="does not exist"):
        pdf.html_to_pdf(tmp_path / "missing.html", tmp_path / "r.pdf")


# ----------------------------------------------------------------- the answer on page 1


def test_summary_answers_in_one_sentence_with_interval_cross_check_and_caveat():
    from sde_core.viz.verdicts.summary import summarize_verdict

    kept = summarize_verdict(row("ft", "unlearned", 3, score_spread_corr=0.98), 100)
    assert kept.label == "not forgotten" and kept.sentence.count(".") == 1
    assert kept.sentence.startswith("ft has NOT forgotten") and "97 of 100" in kept.sentence
    lo, hi = wilson_interval(3, 100)
    assert kept.interval == f"OTR 3% (95% interval {format_interval(lo, hi)})"
    assert kept.cross_check.startswith("Calibrated cross-check agrees") and not kept.conflict
    assert "r = 0.98" in kept.caveat  # the caveat that matters for a "remembered" verdict
    # the calibrated test sees the opposite: the cross-check says so
    torn = summarize_verdict(row("x", "unlearned", 3, n_in_training=10, n_out_of_training=90), 100)
    assert torn.conflict and "DISAGREES" in torn.cross_check
    # a conflict reason from the evidence cross-check is shown on one line as given
    flagged = summarize_verdict(
        row("y", "unlearned", 95, evidence_conflict="MIA finds the forget set (ASR 80%)"), 100
    )
    assert flagged.conflict and flagged.cross_check == (
        "Evidence conflict: MIA finds the forget set (ASR 80%)."
    )
    assert flagged.label == "conflicting evidence" and "no verdict is certified" in flagged.caveat
    # the paper's test fails its null check: that is the caveat (no spread correlation here)
    noisy = summarize_verdict(
        row("z", "unlearned", 3, null_split_fpr=0.2, null_pairs=20), 100, alpha=0.01
    )
    assert "20% of no-difference checks at nominal 1%" in noisy.caveat
    gated = summarize_verdict(
        row("r", "random", 50, otr=float("nan"), inconclusive_reason="panels invalid"), 100
    )
    assert gated.label == "inconclusive" and gated.sentence == "No verdict for r: panels invalid."
    assert gated.interval == "OTR withheld"
    retrained = summarize_verdict(RETRAIN, 100)
    assert "retrained yardstick" in retrained.sentence and "retrained retrained" not in (
        retrained.sentence
    )


def test_report_page_one_answers_for_every_model_and_names_who_asked(result):
    from sde_core.viz.report.document import AuditContext

    context = AuditContext("Erasure request #17", "the regulator", "  ")
    doc = build_html_report(
        result, "syn", figures=[], context=context, document_sha256="ab" * 32, signed_by="SHA256:x"
    )
    first = doc[: doc.index("<h2>Verdicts</h2>")]  # printed: page 1 (a page break follows)
    assert first.endswith('<div class="page-break"></div>')
    audited = result.models.loc[result.models["role"] == "unlearned", "name"].tolist()
    assert first.count('<div class="line line-') == len(audited)  # one line per audited model
    assert "<strong>Criterion:</strong> calibrated OTR within 0.1" in first
    for name in result.models["name"]:
        assert f"<strong>{name}</strong>" in first or f"<strong>{name} " in first, name
    assert first.index("<strong>ga ") < first.index("<strong>retrain</strong>")  # audited first
    assert "Scope and limitations" in first and "Subset size n" in first
    assert "Signed by" in first and 'class="blank"' in first  # the signer's name is blank
    assert "Erasure request #17" in first and "the regulator" in first
    assert "Operated by" not in first  # a blank field is not printed
    assert "ab" * 32 in first and "SHA256:x" in first and "verify" in first
    assert "counter(page)" in doc  # printed pages are numbered
    assert f'@bottom-left {{ content: "SDE report: syn · SHA-256 {"ab" * 32}"' in doc  # every page
    assert "the caveat that matters for it" in doc
    document = report_from_html(doc)
    assert document["audit"] == {"purpose": "Erasure request #17", "requester": "the regulator"}
    assert set(document["models"]["ga"]["summary"]) >= {"sentence", "interval", "caveat"}
    assert "audit" not in report_document(result)  # no context, no empty block


def test_written_report_prints_the_sha256_of_its_json_and_signs_every_file(result, tmp_path):
    import hashlib

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from sde_core.services.audit import write_report_files
    from sde_core.services.signing import verify_signature

    key = tmp_path / "op.pem"
    key.write_bytes(
        Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    files = write_report_files(
        result, {"models": {}}, tmp_path / "out", "syn", pdf=False, sign_key=key
    )
    assert files.sha256 == hashlib.sha256(files.json.read_bytes()).hexdigest()
    assert files.sha256 in files.html.read_text(encoding="utf-8")
    assert files.signature is not None and files.fingerprint is not None
    check = verify_signature(files.signature, expect_key=files.fingerprint, subject=files.json)
    assert check.ok and check.fingerprint == files.fingerprint
    assert sorted(name for name, _ in check.files) == ["sde-report-syn.html", "sde-report-syn.json"]


def test_the_dashboards_signed_report_is_a_zip_of_signed_files(result, tmp_path):
    """The Report page signs with a key file the operator names (an encrypted one with its
    password) through the signing API; the ZIP's files verify; a missing key is a clear
    SigningError, not a traceback."""
    import io
    import zipfile

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from sde_core.errors import SigningError
    from sde_core.services.report_bundle import signed_report_zip
    from sde_core.services.signing import verify_signature

    key = tmp_path / "op.pem"
    key.write_bytes(
        Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"s3cret"),
        )
    )
    bundle = signed_report_zip(result, {"models": {}}, "syn", key, password="s3cret", pdf=False)
    assert bundle.names == ("sde-report-syn.json", "sde-report-syn.html", "sde-report-syn.sig.json")
    out = tmp_path / "unzipped"
    zipfile.ZipFile(io.BytesIO(bundle.data)).extractall(out)
    check = verify_signature(out / "sde-report-syn.sig.json", bundle.fingerprint)
    assert check.ok and check.fingerprint == bundle.fingerprint
    with pytest.raises(SigningError, match="is not a file"):
        signed_report_zip(result, {"models": {}}, "syn", tmp_path / "nope.pem", pdf=False)


def test_messages_do_not_contradict_the_model_they_describe():
    """The retrained model is never said to have 'overshot' an unlearning, and its name is not
    repeated as 'The retrained model retrained'."""
    over = {"over_unlearned": True, "over_unlearning_p": 1e-5, "n_over_unlearned": 30}
    retrained = row("retrained", "retrained", 100, **over)
    text = explain_verdict(retrained, 100).text
    assert "overshot" not in text and "never saw the forget set" in text
    unlearned = explain_verdict(row("rl", "unlearned", 100, **over), 100, retrained).text
    assert "overshot" not in unlearned and "not proof that it forgot" in unlearned
    assert "The retrained model retrained" not in unlearned
    assert "The retrained model (the gold standard)" in unlearned


def test_conflicting_evidence_is_the_verdict_with_its_numbers():
    """method §9: SDE says forgotten or over-unlearned, the behaviour says the model still fits
    D_f: the verdict is "conflicting evidence", the sentence carries the conflicting numbers and
    the report's table shows them."""
    reason = (
        "SDE says OTR 100% (paper's rule) and 100% of the targets over-unlearned, but the model "
        "still fits D_f better than unseen data: accuracy 80.8% on D_f vs 65.4% on D_te"
    )
    rl = row("rl", "unlearned", 100, over_unlearned=True, evidence_conflict=reason)
    explained = explain_verdict(rl, 100, RETRAIN)
    assert explained.label == "conflicting evidence"
    assert "80.8% on D_f vs 65.4% on D_te" in explained.evidence
    assert "contradicts the SDE verdict" in explained.limits
    assert explain_verdict(row("rl", "unlearned", 100, evidence_conflict=""), 100).label == (
        "consistent with forgetting"
    )
    table = comparison_table(pd.DataFrame([rl, RETRAIN])).set_index("model")
    assert table.loc["rl", "conflicting evidence"] == reason
    assert table.loc["retrain", "conflicting evidence"] == ""


def test_comparison_puts_the_forget_set_accuracy_beside_the_retrained_models():
    retrain = RETRAIN | {"acc_f": 68.0, "acc_te": 67.725}
    rl = row("rl", "unlearned", 100, acc_f=80.75, acc_te=65.4)
    text = explain_verdict(rl, 100, retrain).comparison
    assert "right 80.8% of the time, the retrained model 68.0%" in text
    assert "(unseen test data: 65.4% and 67.7%)" in text
    bare = explain_verdict(row("rl", "unlearned", 100), 100, RETRAIN)
    assert "of the time" not in bare.comparison  # no accuracies: no sentence
