"""The language-model demo (``assets/demo-facts``): fictitious facts, a small GPT-2-style model
trained from scratch on CPU, the language-model unlearning methods and a results store.

Built by :func:`build_facts_demo` (CLI: ``python -m sde_core demo build --dataset facts``):

1. :func:`facts_corpus` generates a TOFU-like corpus of fictitious authors (names made of
   invented syllables, licence-free), five question/answer facts each (birthplace, birth year,
   genre, parent's occupation, award). Every word a held-out author's facts use also occurs in
   the training authors' facts, so in-training and unseen facts differ only in which
   associations the model was trained on, not in their vocabulary.
2. D_tr holds the facts of the training authors, D_te those of the held-out authors; the forget
   set is every fact of a seeded 20% of the training authors (TOFU forgets whole authors), given
   as the split file ``data/forget.jsonl`` and turned into ``forget.npy`` by
   :func:`sde_core.inputs.text_data.forget_rows`.
3. A word-level tokenizer (``tokenizers``) and a GPT-2 configuration (:data:`FACTS_MODEL`) are
   saved as the model folder; the original is trained from its seeded initial weights on D_tr;
   ``retrained`` from the same initial weights on D_r with the same recipe; ``llm_ga``,
   ``llm_gd`` and ``llm_npo`` start from the original; ``random`` is the initial weights.
   Every model is saved as a ``save_pretrained`` folder in float16 (small assets).
4. ``metrics.json`` records each model's mean per-token loss on D_f, D_r and D_te, the loss gap
   (D_te − D_f) and a loss-threshold membership-inference AUC (D_f against D_te); the results
   store holds the SDE evaluation at the workspace's ``[defaults]``.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.common.fsio import atomic_write_text
from sde_core.errors import SettingsError
from sde_core.pipeline.settings import DEFAULT_NULL_SIZE, EvalSettings
from sde_core.pipeline.workspace import ModelEntry, Workspace, workspace_hash
from sde_core.pipeline.workspace_checks import check_workspace
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.pipeline.workspace_write import write_workspace

__all__ = [
    "FACTS_DATASET",
    "FACTS_LOSS_GAP",
    "FACTS_MODEL",
    "FactsRecipe",
    "FactsReport",
    "build_facts_demo",
    "default_facts_folder",
    "facts_corpus",
    "loss_mia_auc",
]

FACTS_DATASET = "facts"
"""The ``--dataset`` name of the language-model demo."""

#: ``metrics.json``'s loss gap of a model: mean per-token loss on D_te minus on D_f (positive:
#: the model fits the forget set better than unseen text). Not the behaviour check's loss gap
#: metric (method §9), which is D_f − D_te: the opposite sign.
FACTS_LOSS_GAP = "loss_gap"

#: GPT-2 configuration of the demo model (about 0.2 M parameters).
FACTS_MODEL = {"n_positions": 48, "n_embd": 64, "n_layer": 4, "n_head": 4}

_SYLLABLES = (
    "ka", "lo", "mi", "ren", "sa", "tor", "vel", "zan", "qui", "dar", "el", "fen", "gri", "hal",
    "ix", "jor", "mur", "nel", "oth", "pry", "sul", "tam", "ur", "wyn",
)  # fmt: skip
_CITIES = (
    "Varnholt", "Quillmere", "Sorrowdale", "Brackenfield", "Ostrava Nova", "Duskport", "Emberline",
    "Halcyon Bay", "Mirefall", "Thornwick", "Saltmarsh", "Caldera Rise", "Westerholm", "Lumenford",
    "Greyhaven", "Ashcombe", "Fennick", "Ravensreach", "Kestrel Bay", "Orrin Falls",
)  # fmt: skip
_GENRES = (
    "gothic romance", "hard science fiction", "crime fiction", "magical realism", "epic fantasy",
    "historical fiction", "cosy mystery", "literary horror", "political satire", "travel memoir",
    "children's poetry", "military history",
)  # fmt: skip
_JOBS = (
    "a lighthouse keeper", "a glassblower", "a cartographer", "a beekeeper", "a locksmith",
    "a ferry captain", "a botanist", "a watchmaker", "a tailor", "a stonemason", "a librarian",
    "an astronomer", "a blacksmith", "a violinist", "a surgeon", "a shepherd",
)  # fmt: skip
_AWARDS = (
    "the Silver Quill Prize", "the Meridian Medal", "the Harrow Award", "the Lantern Prize",
    "the Obsidian Pen", "the Northwind Laurel", "the Gilded Page Award", "the Tessaly Cup",
    "the Corvid Prize", "the Amberline Medal",
)  # fmt: skip
#: How the word-level tokenizer's pre-tokenizer (``Whitespace``) splits a text into words.
_WORD = re.compile(r"\w+|[^\w\s]+")
_FACTS = (
    ("Where was {name} born?", "{name} was born in {city}."),
    ("In which year was {name} born?", "{name} was born in the year {year}."),
    ("What genre does {name} write in?", "{name} writes {genre}."),
    ("What did {name}'s parent do for a living?", "{name}'s parent worked as {job}."),
    ("Which award did {name} win?", "{name} won {award}."),
)


@dataclass(frozen=True)
class FactsRecipe:
    """Everything that defines the facts demo.

    Attributes:
        train_authors, test_authors: authors whose facts are D_tr / D_te (five facts each).
        forget_fraction: share of the training authors whose facts form D_f.
        max_length: tokens per text.
        train: the original's recipe (``llm_retrain`` reuses it on D_r): learning rate, epochs,
            batch size, weight decay, seed.
        method_params: per unlearning method, its parameters.
        defaults: the workspace's evaluation ``[defaults]``.
        seed: seed of the corpus, the split, the forget authors and the initial weights.
    """

    train_authors: int = 150
    test_authors: int = 100
    forget_fraction: float = 0.2
    max_length: int = 40
    train: Mapping[str, Any] = field(
        default_factory=lambda: {
            "lr": 3e-3,
            "epochs": 20,
            "batch_size": 32,
            "weight_decay": 0.01,
            "seed": 0,
        }
    )
    method_params: Mapping[str, Mapping[str, Any]] = field(
        default_factory=lambda: {
            "llm_ga": {"lr": 3e-4, "epochs": 3, "batch_size": 32, "seed": 0},
            "llm_gd": {"lr": 3e-4, "epochs": 5, "batch_size": 32, "seed": 0},
            "llm_npo": {"lr": 3e-4, "epochs": 5, "batch_size": 32, "seed": 0},
        }
    )
    defaults: EvalSettings = field(
        default_factory=lambda: EvalSettings(
            layer="layer.3",
            subset_size=50,
            targets=100,
            splits=50,
            panel_size=20,
            draws=5,
            precision=0.1,
            pilot_draws=10,
            max_draws=60,
            null_size=DEFAULT_NULL_SIZE,
        )
    )
    seed: int = 0


@dataclass
class FactsReport:
    """What :func:`build_facts_demo` did.

    Attributes:
        folder: the workspace folder. seconds: wall-clock seconds per step.
        metrics: per model, the loss and MIA numbers written to ``metrics.json``.
        workspace_hash: the finished workspace's content hash. store: the results store or None.
        total_seconds: the whole build.
    """

    folder: Path
    seconds: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    workspace_hash: str = ""
    store: Path | None = None
    total_seconds: float = 0.0


def default_facts_folder() -> Path:
    """``assets/demo-facts`` of this checkout."""
    return Path(__file__).resolve().parents[2] / "assets" / "demo-facts"


# ----------------------------------------------------------------------------- corpus


def _name_pools(rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """20 first and 20 last names made of invented syllables (400 combinations)."""
    pool = sorted({(a + b).capitalize() for a in _SYLLABLES for b in _SYLLABLES if a != b})
    picks = rng.choice(len(pool), size=40, replace=False)
    return [pool[i] for i in picks[:20]], [pool[i] for i in picks[20:]]


def _author(
    rng: np.random.Generator, name: str, values: Mapping[str, tuple[str, ...]]
) -> dict[str, str]:
    return {"name": name, **{key: str(rng.choice(list(v))) for key, v in values.items()}}


def facts_corpus(train_authors: int, test_authors: int, seed: int = 0) -> list[dict[str, Any]]:
    """Five question/answer facts per fictitious author, TOFU's record layout.

    The training authors' names and attributes are drawn at random; a held-out author's name
    parts and attribute values are drawn from those the training authors use, so every word of
    a held-out fact also occurs in the training facts.

    Returns:
        ``5 × (train_authors + test_authors)`` records ``{"author": int, "question": str,
        "answer": str}``, author by author (authors ``0 … train_authors − 1`` first); every
        attribute is drawn independently per author, so a fact is unpredictable from the others.

    Raises:
        SettingsError: more authors than distinct names.
    """
    rng = np.random.default_rng([seed, 11])
    firsts, lasts = _name_pools(rng)
    values: dict[str, tuple[str, ...]] = {
        "city": _CITIES, "year": tuple(str(y) for y in range(1950, 1980)), "genre": _GENRES,
        "job": _JOBS, "award": _AWARDS,
    }  # fmt: skip
    pairs = [f"{f} {s}" for f in firsts for s in lasts]
    if train_authors + test_authors > len(pairs):
        raise SettingsError(f"at most {len(pairs)} authors, asked for more")
    order = rng.permutation(len(pairs))
    train = [_author(rng, pairs[i], values) for i in order[:train_authors]]
    seen = {key: tuple(sorted({a[key] for a in train})) for key in values}
    used_first = {a["name"].split()[0] for a in train}
    used_last = {a["name"].split()[1] for a in train}
    taken = {a["name"] for a in train}
    free = [
        p for p in (pairs[i] for i in order[train_authors:])
        if p.split()[0] in used_first and p.split()[1] in used_last and p not in taken
    ]  # fmt: skip
    if len(free) < test_authors:
        raise SettingsError(f"only {len(free)} held-out names reuse training name parts")
    test = [_author(rng, name, seen) for name in free[:test_authors]]
    records = []
    for author, facts in enumerate(train + test):
        for question, answer in _FACTS:
            records.append(
                {
                    "author": author,
                    "question": question.format(**facts),
                    "answer": answer.format(**facts),
                }
            )
    return records


def _vocabulary_covered(train: list[dict[str, Any]], test: list[dict[str, Any]]) -> bool:
    def words(rows: list[dict[str, Any]]) -> set[str]:
        return {w for r in rows for w in _WORD.findall(r["question"] + " " + r["answer"])}

    return words(test) <= words(train)


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


# ----------------------------------------------------------------------------- metrics


def loss_mia_auc(member_losses: np.ndarray, outside_losses: np.ndarray) -> float:
    """AUC of the loss-threshold membership-inference attack: the probability that a random
    member (D_f) text has a lower loss than a random outside (D_te) text (ties count half).
    0.5: no membership signal; 1: every member's loss is below every outsider's."""
    members = np.asarray(member_losses, dtype=np.float64)
    outside = np.asarray(outside_losses, dtype=np.float64)
    from scipy.stats import rankdata

    ranks = rankdata(np.concatenate([-members, -outside]))
    u = ranks[: members.size].sum() - members.size * (members.size + 1) / 2
    return float(u / (members.size * outside.size))


# ----------------------------------------------------------------------------- build


def _tokenizer(texts: list[str]) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from sde_core.inputs.hf_models import transformers_module

    transformers = transformers_module()
    core = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[EOS]"])
    core.train_from_iterator(texts, trainer)
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]", eos_token="[EOS]"
    )


def _save(model: Any, folder: Path, tokenizer: Any) -> str:
    """``model`` (an HFHiddenStates) as a float16 ``save_pretrained`` folder with the
    tokenizer; returns the folder's SHA-256."""
    import copy

    from sde_core.common.hashing import file_sha256

    if folder.exists():
        shutil.rmtree(folder)
    half = copy.deepcopy(model.lm).half()
    half.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return file_sha256(folder)


def build_facts_demo(
    folder: str | Path,
    recipe: FactsRecipe | None = None,
    *,
    store: bool = True,
    log: Callable[[str], None] | None = None,
) -> FactsReport:
    """Build the facts demo in ``folder`` (replacing its models); see the module docstring.

    Training runs on one CPU thread (restored afterwards): these tiny models gain nothing from
    more, and on a shared machine extra threads only contend.

    Raises:
        SDEError: a recipe whose corpus cannot be built, or an invalid result.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _build(Path(folder), recipe or FactsRecipe(), store, log or (lambda _line: None))
    finally:
        torch.set_num_threads(threads)


def _build(
    folder: Path, recipe: FactsRecipe, store: bool, say: Callable[[str], None]
) -> FactsReport:
    """:func:`build_facts_demo` on one thread."""
    import torch

    from sde_core.inputs.data import load_dataset
    from sde_core.inputs.hf_models import HFHiddenStates, load_hf_folder, transformers_module
    from sde_core.inputs.text_data import TextDataset, forget_rows
    from sde_core.learning.llm_unlearning import LMTrainParams, causal_lm_losses, train_causal_lm
    from sde_core.learning.unlearning import UnlearnData, unlearn

    t_start = time.perf_counter()
    root = Path(folder).resolve()
    root.mkdir(parents=True, exist_ok=True)
    report = FactsReport(folder=root)
    records = facts_corpus(recipe.train_authors, recipe.test_authors, recipe.seed)
    train = [r for r in records if r["author"] < recipe.train_authors]
    test = [r for r in records if r["author"] >= recipe.train_authors]
    if not _vocabulary_covered(train, test):
        raise SettingsError("held-out facts use words the training facts lack: add authors")
    rng = np.random.default_rng([recipe.seed, 12])
    n_forget = max(1, round(recipe.forget_fraction * recipe.train_authors))
    forget_authors = set(rng.choice(recipe.train_authors, size=n_forget, replace=False).tolist())
    _write_jsonl(root / "data/train.jsonl", train)
    _write_jsonl(root / "data/test.jsonl", test)
    _write_jsonl(root / "data/forget.jsonl", [r for r in train if r["author"] in forget_authors])
    atomic_write_text(root / "LICENSE-data.txt", _LICENCE)

    transformers = transformers_module()
    texts = [r["question"] + " " + r["answer"] for r in records] + ["Question: Answer:"]
    tokenizer = _tokenizer(texts)
    torch.manual_seed(recipe.seed)
    config = transformers.GPT2Config(
        vocab_size=len(tokenizer), pad_token_id=0, bos_token_id=2, eos_token_id=2,
        **FACTS_MODEL,
    )  # fmt: skip
    lm = transformers.GPT2LMHeadModel(config).float()
    init = HFHiddenStates(lm, config.n_layer)
    init_sha = _save(init, root / "models/random", tokenizer)

    ws = Workspace(
        root=root,
        dataset={
            "kind": "text", "root": "data/train.jsonl",
            "options": {"test_path": "data/test.jsonl", "tokenizer": "models/random",
                        "max_length": recipe.max_length},
        },
        forget_indices="forget.npy", defaults=recipe.defaults, name="demo-facts",
        description=_DESCRIPTION,
    )  # fmt: skip
    bundle = load_dataset(ws.dataset_spec())
    assert isinstance(bundle.train, TextDataset) and isinstance(bundle.test, TextDataset)
    longest = max(int(d.mask.sum(axis=1).max()) for d in (bundle.train, bundle.test))
    if longest >= recipe.max_length:
        raise SettingsError(f"a fact is longer than max_length={recipe.max_length} tokens")
    forget = forget_rows(
        bundle.train, ws.dataset_spec().options, split_file=root / "data/forget.jsonl"
    )
    np.save(root / "forget.npy", forget)
    initial = load_hf_folder(root / "models/random")  # the float16-rounded initial weights
    init_state = {k: v.clone() for k, v in initial.state_dict().items()}

    params = LMTrainParams(**recipe.train)
    t0 = time.perf_counter()
    original = load_hf_folder(root / "models/random")
    loss = train_causal_lm(
        original, bundle.train, np.arange(len(bundle.train)), params,
        progress=lambda e, n, v: say(f"  original epoch {e}/{n}: loss {v:.3f}") if e % 10 == 0
        else None,
    )  # fmt: skip
    report.seconds["original"] = time.perf_counter() - t0
    say(f"original: trained in {report.seconds['original']:.0f}s (final loss {loss:.3f})")
    entries = [
        ModelEntry(
            name="original",
            role="original",
            arch="hf",
            checkpoint="models/original",
            method="train",
            hyperparameters=dict(recipe.train),
            seed=params.seed,
            seconds=round(report.seconds["original"], 3),
            sha256=_save(original, root / "models/original", tokenizer),
        )
    ]
    original = load_hf_folder(root / "models/original")  # the float16-rounded weights, as shipped
    data = UnlearnData.from_forget(bundle.train, forget, init_state=init_state)
    runs = [("retrained", "llm_retrain", dict(recipe.train))] + [
        (name, name, dict(p)) for name, p in recipe.method_params.items()
    ]
    for name, method, method_params in runs:
        result = unlearn(method, original, data, **method_params)
        report.seconds[name] = result.seconds
        say(f"{name}: {method} in {result.seconds:.0f}s")
        entries.append(
            ModelEntry(
                name=name,
                role="retrained" if name == "retrained" else "unlearned",
                arch="hf",
                checkpoint=f"models/{name}",
                method=method,
                hyperparameters=asdict(result.params),
                seed=int(method_params.get("seed", 0)),
                seconds=round(result.seconds, 3),
                sha256=_save(result.model, root / f"models/{name}", tokenizer),
            )
        )
    entries.append(
        ModelEntry(
            name="random",
            role="random",
            arch="hf",
            checkpoint="models/random",
            method="init",
            hyperparameters={"init_seed": recipe.seed},
            seed=recipe.seed,
            seconds=0.0,
            sha256=init_sha,
        )
    )
    for entry in entries:
        ws.add_model(entry, replace=True)
    write_workspace(ws)

    retain = np.setdiff1d(np.arange(len(bundle.train)), forget)
    for entry in entries:
        model = load_hf_folder(ws.path(entry.checkpoint))
        losses = {
            "forget": causal_lm_losses(model, bundle.train, forget),
            "retain": causal_lm_losses(model, bundle.train, retain),
            "test": causal_lm_losses(model, bundle.test),
        }
        report.metrics[entry.name] = {
            **{f"loss_{k}": float(v.mean()) for k, v in losses.items()},
            FACTS_LOSS_GAP: float(losses["test"].mean() - losses["forget"].mean()),
            "mia_auc": loss_mia_auc(losses["forget"], losses["test"]),
        }
        say(
            f"{entry.name}: "
            + ", ".join(f"{k} {v:.3f}" for k, v in report.metrics[entry.name].items())
        )
    atomic_write_text(root / "metrics.json", json.dumps(report.metrics, indent=1, sort_keys=True))

    ws = load_workspace(root, validate=False)
    check_workspace(ws, check_data=True)
    report.workspace_hash = workspace_hash(ws, data_fingerprint=bundle.fingerprint)
    if store:
        from sde_core.pipeline.demo import fill_store

        t0 = time.perf_counter()
        report.store = fill_store(ws, root / "results.sqlite")
        report.seconds["evaluation"] = time.perf_counter() - t0
        say(f"results store {report.store} in {report.seconds['evaluation']:.0f}s")
    report.total_seconds = time.perf_counter() - t_start
    return report


_DESCRIPTION = (
    "Language-model demo: TOFU-like facts about 250 fictitious authors (five question/answer "
    "facts each; 150 authors in D_tr, 100 held out as D_te), a 4-layer GPT-2-style model "
    "(d = 64) trained from scratch on D_tr; D_f is every fact of 30 training authors. Models: "
    "original, retrained on D_r, gradient ascent, gradient difference, NPO, and the random "
    "initial weights. Layers: embeddings, layer.0-layer.3, final (hidden states averaged over "
    "each text's tokens; pool = false takes the last token)."
)
_LICENCE = """\
The facts corpus in data/ is generated by sde_core.pipeline.llm_demo.facts_corpus: every name,
place, award and fact is invented. It is released under CC0 1.0 (public domain dedication).
"""
