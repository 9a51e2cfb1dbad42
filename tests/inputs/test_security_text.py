"""Hostile language-model folders and text data (issue 31, items 1, 2, 7, 8 and 9): a
tokenizer's own code never runs, no file inside a named folder is read from outside the allowed
roots, text data is capped before it is tokenised, templates name plain fields only, and each
case ends in a clear :class:`~sde_core.errors.SDEError`, never a traceback.

The folders are the real ones ``save_pretrained`` / ``save_to_disk`` write (a copy of the shipped
``assets/demo-facts`` workspace, a ``datasets`` folder), altered the way an attacker would.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sde_core.errors import CheckpointError, DataError, SDEError, SettingsError
from sde_core.inputs.checkpoint_files import inspect_checkpoint
from sde_core.inputs.data import DatasetSpec
from sde_core.inputs.hf_models import load_hf_folder, load_tokenizer
from sde_core.inputs.text_data import (
    MAX_TEXT_CHARS,
    parse_template,
    read_text_source,
    record_texts,
)
from sde_core.inputs.text_records import MAX_RECORD_BYTES, MAX_TEXT_COLUMNS, read_records
from sde_core.pipeline.model_inputs import load_entry_model
from sde_core.pipeline.workspace_checks import validate_workspace
from sde_core.pipeline.workspace_load import load_workspace

pytest.importorskip("transformers")  # the optional [llm] extra

DEMO = Path(__file__).resolve().parents[2] / "assets" / "demo-facts"


@pytest.fixture
def facts(tmp_path: Path) -> Path:
    """A copy of the shipped language-model workspace (without its results store)."""
    ws = tmp_path / "ws"
    shutil.copytree(DEMO, ws, ignore=shutil.ignore_patterns("results.sqlite"))
    return ws


def _outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir(exist_ok=True)
    return out


# ------------------------------------------------------------------ item 1: remote code


def _custom_tokenizer(folder: Path, marker: Path) -> None:
    """A tokenizer folder as a custom-code tokenizer ships: auto_map + tokenizer_class in
    tokenizer_config.json and the class in tokenization_x.py (which here writes a marker)."""
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["auto_map"] = {"AutoTokenizer": ["tokenization_x.XTokenizer", None]}
    config["tokenizer_class"] = "XTokenizer"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "tokenization_x.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "from transformers import PreTrainedTokenizerFast\n"
        "class XTokenizer(PreTrainedTokenizerFast):\n    pass\n"
    )


def test_a_tokenizer_with_its_own_code_is_refused_and_never_run(
    facts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "ran"
    _custom_tokenizer(facts / "models" / "random", marker)
    monkeypatch.setattr("sys.stdin", None)  # a prompt would fail, not wait
    with pytest.raises(DataError, match=r"tokenization_x\.py.*Nothing in it was run"):
        load_tokenizer(facts / "models" / "random")
    ws = load_workspace(facts)
    with pytest.raises(DataError, match="auto_map"):
        read_text_source(Path(ws.dataset_spec().root), ws.dataset_spec().options)
    assert not marker.exists()
    # the same folder as a model: the tokenizer's code makes it code, like config.json's auto_map
    info = inspect_checkpoint(facts / "models" / "random")
    assert info.is_code and any("tokenizer_config.json" in c for c in info.code_objects)
    with pytest.raises(CheckpointError, match=r"tokenization_x\.py"):
        load_hf_folder(facts / "models" / "random")
    assert not marker.exists()


def test_a_python_file_alone_makes_a_model_folder_code(facts: Path) -> None:
    (facts / "models" / "original" / "helper.py").write_text("raise SystemExit\n")
    info = inspect_checkpoint(facts / "models" / "original")
    assert info.code_objects == ("helper.py (Python code)",)


# ------------------------------------------------------------- item 2: folder contents


def test_weights_linked_outside_the_roots_are_refused(facts: Path, tmp_path: Path) -> None:
    weights = facts / "models" / "original" / "model.safetensors"
    moved = _outside(tmp_path) / "model.safetensors"
    shutil.move(weights, moved)
    weights.symlink_to(moved)
    with pytest.raises(SDEError, match=r"checkpoint file model\.safetensors .*outside the allow"):
        load_workspace(facts, roots=[])
    ws = load_workspace(facts, roots=[], validate=False)
    problems = [str(p) for p in validate_workspace(ws)]
    assert any("model.safetensors" in p and "outside the allowed folders" in p for p in problems)
    with pytest.raises(SDEError, match=r"file model\.safetensors .*outside the allowed folders"):
        load_entry_model(ws, ws.model("original"))
    # inside the roots (the user listed the folder) it loads
    assert load_entry_model(load_workspace(facts, roots=[moved.parent]), ws.model("original"))


def test_weights_linked_to_a_system_file_are_a_clean_error(facts: Path) -> None:
    weights = facts / "models" / "original" / "model.safetensors"
    weights.unlink()
    weights.symlink_to("/etc/passwd")
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        load_hf_folder(facts / "models" / "original")
    ws = load_workspace(facts, roots=[], validate=False)
    with pytest.raises(SDEError, match="outside the allowed folders"):
        load_entry_model(ws, ws.model("original"))


def test_tokenizer_files_linked_outside_the_roots_are_refused(facts: Path, tmp_path: Path) -> None:
    tok = facts / "models" / "random" / "tokenizer.json"
    moved = _outside(tmp_path) / "tokenizer.json"
    shutil.move(tok, moved)
    tok.symlink_to(moved)
    ws = load_workspace(facts, roots=[], validate=False)
    with pytest.raises(SDEError, match=r"dataset\.options\.tokenizer file tokenizer\.json"):
        ws.dataset_spec()
    problems = [str(p) for p in validate_workspace(ws)]
    assert any("tokenizer.json" in p and "outside" in p for p in problems)


def _disk_dataset(folder: Path) -> Path:
    import datasets

    datasets.disable_progress_bars()
    datasets.Dataset.from_dict({"text": ["inside a", "inside b"]}).save_to_disk(str(folder))
    return folder


def test_a_dataset_folder_naming_shards_outside_itself_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    import datasets

    outside = _outside(tmp_path) / "secret"
    datasets.Dataset.from_dict({"text": ["SECRET ROW"]}).save_to_disk(str(outside))
    for name in ("../outside/secret/data-00000-of-00001.arrow", str(outside / "x.arrow")):
        folder = _disk_dataset(tmp_path / f"d{len(name)}")
        state = json.loads((folder / "state.json").read_text())
        state["_data_files"] = [{"filename": name}]
        (folder / "state.json").write_text(json.dumps(state))
        with pytest.raises(DataError, match="leaves the dataset folder"):
            read_records(folder)
    splits = _disk_dataset(tmp_path / "dd" / "train")
    (splits.parent / "dataset_dict.json").write_text(json.dumps({"splits": ["../outside"]}))
    with pytest.raises(DataError, match="leaves the dataset folder"):
        read_records(splits.parent)
    # a shard linked out is inside the folder by name: the workspace's roots refuse it
    linked = _disk_dataset(tmp_path / "ws" / "data")
    shard = linked / "data-00000-of-00001.arrow"
    shard.unlink()
    shard.symlink_to(outside / "data-00000-of-00001.arrow")
    from sde_core.common.paths import check_folder_in_roots
    from sde_core.errors import PathError

    with pytest.raises(PathError, match=r"data-00000-of-00001\.arrow .*outside"):
        check_folder_in_roots(linked, [linked.parent.resolve()], what="dataset.root")


# ------------------------------------------------------------------ item 7: size caps


def _qa_spec(root: Path, tokenizer: Path, **options: Any) -> DatasetSpec:
    return DatasetSpec("text", root, options={"tokenizer": str(tokenizer), **options})


def test_a_huge_jsonl_record_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    big = json.dumps({"text": "x" * (MAX_RECORD_BYTES + 10)})
    path.write_text(json.dumps({"text": "ok"}) + "\n" + big + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"line 2 is 1,048,\d+ bytes.*MAX_RECORD_BYTES"):
        read_records(path)


def test_a_text_over_the_character_cap_is_refused_before_tokenising() -> None:
    records = [{"text": "a"}, {"text": "y" * (MAX_TEXT_CHARS + 1)}]
    with pytest.raises(DataError, match=r"record 1 .*100,001 characters.*MAX_TEXT_CHARS"):
        record_texts(records, {}, "train split")
    padded = [{"question": "q" * 60_000, "answer": "a" * 60_000}]
    with pytest.raises(DataError, match="by its template"):
        record_texts(padded, {}, "train split")


def test_a_csv_with_too_many_columns_is_refused_from_its_header(tmp_path: Path) -> None:
    path = tmp_path / "wide.csv"
    n = MAX_TEXT_COLUMNS + 1
    path.write_text(
        ",".join(f"c{i}" for i in range(n)) + "\n" + ",".join("v" * n) + "\n", encoding="utf-8"
    )
    with pytest.raises(DataError, match=r"the header has 1,001 fields.*MAX_TEXT_COLUMNS"):
        read_records(path)
    wide = tmp_path / "wide.jsonl"
    wide.write_text(json.dumps({f"c{i}": "v" for i in range(n)}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match="record 0 has 1,001 fields"):
        read_records(wide)


@pytest.mark.parametrize(
    "template",
    [
        "{question:>3000000}",  # pads every text to 3 million characters
        "{question.nope}",  # AttributeError in str.format
        "{question.__class__.__mro__}",  # attribute access reaches Python internals
        "{question[0]}",
        "{question!r}",
        "Q: {}",
        "{question",
    ],
)
def test_templates_name_plain_fields_only(template: str, tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"options\.template"):
        parse_template(template)
    with pytest.raises(DataError, match=r"options\.template"):
        DatasetSpec("text", tmp_path / "a.jsonl", options={"template": template})
    with pytest.raises(DataError, match=r"options\.template"):
        record_texts([{"question": "q"}], {"template": template}, "train split")


def test_plain_templates_fill_like_format() -> None:
    records = [{"question": "Q?", "answer": 3, "with space": "s"}]
    template = "{{literal}} {question} / {answer} / {with space}"
    assert record_texts(records, {"template": template}, "train") == [template.format(**records[0])]
    with pytest.raises(DataError, match="no field 'missing'"):
        record_texts(records, {"template": "{missing}"}, "train")


# --------------------------------------------------------- item 9: silently wrong values


@settings(
    derandomize=True, deadline=None, database=None, max_examples=60,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)  # fmt: skip
@given(
    st.lists(
        st.text(
            st.characters(blacklist_categories=("Cs",)) | st.sampled_from("\u2028\u2029\x85\r"),
            max_size=12,
        ),
        min_size=1,
        max_size=5,
    )
)
def test_jsonl_with_any_unicode_round_trips(tmp_path: Path, texts: list[str]) -> None:
    path = tmp_path / "u.jsonl"
    rows = [{"text": t, "n": i} for i, t in enumerate(texts)]
    path.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )
    assert read_records(path) == rows


def test_jsonl_line_separators_inside_strings_are_data(tmp_path: Path) -> None:
    path = tmp_path / "sep.jsonl"
    rows = [{"text": "a\u2028b"}, {"text": "c\u2029d\x85e"}]
    path.write_bytes(b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\r\n" for r in rows))
    assert read_records(path) == rows


def test_a_report_whose_format_version_is_a_boolean_is_refused(tmp_path: Path) -> None:
    from sde_core.services.report_verify import load_report
    from sde_core.viz.report.document import REPORT_FORMAT

    path = tmp_path / "r.json"
    for version in (True, False, 1.0, "1"):
        path.write_text(
            json.dumps({"format": REPORT_FORMAT, "format_version": version, "manifest": {}})
        )
        with pytest.raises(SettingsError, match="report format version"):
            load_report(path)


@pytest.mark.parametrize(
    "labels", [np.array([0.0, 1.0] * 3), np.array([False, True] * 3)], ids=["float", "bool"]
)
def test_float_and_bool_class_labels_are_refused(labels: np.ndarray, tmp_path: Path) -> None:
    from sde_core.inputs.data import load_dataset

    path = tmp_path / "d.npz"
    x = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    np.savez(path, x_train=x, y_train=labels, x_test=x, y_test=np.arange(6) % 2)
    with pytest.raises(DataError, match=r"y_train must be integer class ids, got (float64|bool)"):
        load_dataset(DatasetSpec("npz", path))
