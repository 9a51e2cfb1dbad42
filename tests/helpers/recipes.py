"""The bring-your-own recipes of ``docs/bring-your-own.md`` run as a user runs them: a
:class:`Project` folder runs a recipe line by line like a shell (``export`` lines set the
environment of later commands, the page's scripts run as ``python script.py ...``, ``python -m
sde_core ...`` runs in process, a comment ``# error: TEXT`` after a command means it must fail
with that message); plus the comparisons of result rows and the CIFAR-10 python batches the
recipes start from. Used by tests/cli/test_scenarios.py and tests/inputs/test_ecosystems.py."""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import pickle
import re
import runpy
import shlex
import sys
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers.designs import FIXED_FLAGS
from sde_core.cli import main
from sde_core.pipeline.workspace import Workspace
from sde_core.pipeline.workspace_load import load_workspace

__all__ = [
    "CIFAR_CLASSES", "DOC", "FAST", "FILES", "KEYS", "PER_BATCH", "RECIPES", "Project", "Step",
    "commands", "differ", "new_project", "same", "sha256", "write_cifar10",
]  # fmt: skip

DOC = Path(__file__).resolve().parents[2] / "docs" / "bring-your-own.md"
#: Result keys compared between models (the evaluation JSON may gain others).
KEYS = ("otr", "f1", "reference_p", "references_valid", "acc_r", "acc_f", "acc_te", "asr")
#: Added to every recipe's ``evaluate`` command, for speed only.
FAST = ("--targets", "6", "--splits", "20", "--baseline-targets", "0", *FIXED_FLAGS)


def _blocks(kind: str) -> dict[str, str]:
    """``{name: code}`` of the fenced blocks after ``<!-- kind: name -->`` in the page."""
    found = re.findall(
        rf"<!-- {kind}: ([\w.-]+) -->\n```\w*\n(.*?)\n```", DOC.read_text(encoding="utf-8"), re.S
    )
    names = [name for name, _ in found]
    assert len(set(names)) == len(names), f"duplicate {kind} names in {DOC.name}: {names}"
    return dict(found)


RECIPES = _blocks("recipe")
FILES = _blocks("file")


def commands(block: str) -> list[tuple[str, str | None]]:
    """The block's commands (continuation lines joined), each with the error text that the
    comment ``# error: TEXT`` right after it expects (None: the command must succeed)."""
    commands: list[tuple[str, str | None]] = []
    pending = ""
    for raw in block.splitlines():
        line = raw.strip()
        if pending:
            line, pending = pending + " " + line, ""
        if line.endswith("\\"):
            pending = line[:-1].rstrip()
        elif line.startswith("# error: "):
            assert commands and commands[-1][1] is None, f"stray error comment: {line}"
            commands[-1] = (commands[-1][0], line[len("# error: ") :])
        elif line and not line.startswith("#"):
            commands.append((line, None))
    assert not pending, "a command ends with a line continuation"
    return commands


@dataclass
class Step:
    """One command of a recipe: its words, exit status and output."""

    words: list[str]
    code: int
    out: str
    err: str


@dataclass
class Project:
    """A user's project folder: the recipes run in it, with the environment they export."""

    root: Path
    env: dict[str, str] = field(default_factory=dict)

    def steps(self, recipe: str) -> Iterator[Step]:
        """Run ``recipe`` command by command (lazily: the caller may look between steps)."""
        for line, error in commands(RECIPES[recipe]):
            text = re.sub(
                r"\$\{?(\w+)\}?",
                lambda m: str(self.root) if m[1] == "PWD" else self.env.get(m[1], os.environ[m[1]]),
                line,
            )
            words = shlex.split(text)
            if words[0] == "export":
                key, _, value = words[1].partition("=")
                self.env[key] = value
                continue
            step = self.command(words)
            if error is None:
                assert step.code == 0, (line, step.out[-2000:], step.err[-2000:])
            else:
                assert step.code == 1 and f"error: {error}" in step.err, (line, step.err)
            yield step

    def run(self, recipe: str) -> list[Step]:
        """Run the whole recipe."""
        return list(self.steps(recipe))

    def command(self, words: list[str]) -> Step:
        """Run one command (its words) in the project folder with the exported environment."""
        out, err = io.StringIO(), io.StringIO()
        with pytest.MonkeyPatch.context() as mp, redirect_stdout(out), redirect_stderr(err):
            mp.chdir(self.root)
            for key, value in self.env.items():
                mp.setenv(key, value)
                if key == "PYTHONPATH":  # what a new interpreter does with it at start-up
                    for folder in reversed(value.split(os.pathsep)):
                        mp.syspath_prepend(folder)
                    # child processes must still import this checkout's sde_core
                    mp.setenv(key, os.pathsep.join([value, *sys.path]))
            if words[:3] == ["python", "-m", "sde_core"]:
                argv = words[3:] + (list(FAST) if words[3] == "evaluate" else [])
                code = main(argv)
            elif len(words) > 1 and words[0] == "python" and words[1].endswith(".py"):
                mp.setattr(sys, "argv", words[1:])
                runpy.run_path(words[1], run_name="__main__")
                code = 0
            else:
                pytest.fail(f"a recipe line the test cannot run: {' '.join(words)}")
        return Step(words, code, out.getvalue(), err.getvalue())

    def workspace(self, folder: str) -> Workspace:
        """The workspace in ``folder``, loaded with the roots the recipes exported."""
        roots = self.env.get("SDE_DATA_ROOTS", "").split(os.pathsep)
        return load_workspace(self.root / folder, roots=[r for r in roots if r])

    def results(self, name: str) -> dict[str, dict[str, Any]]:
        """The ``models`` of an evaluation JSON the recipe wrote."""
        return json.loads((self.root / name).read_text())["models"]


def new_project(tmp_path_factory: pytest.TempPathFactory, name: str) -> Project:
    root = tmp_path_factory.mktemp(name)
    for file, code in FILES.items():
        (root / file).write_text(code + "\n", encoding="utf-8")
    return Project(root)


def _equal(a: Any, b: Any) -> bool:
    both_nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    return a == b or both_nan


def differ(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two result rows differ in any compared number."""
    return any(not _equal(a[k], b[k]) for k in KEYS)


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two result rows agree on every compared number."""
    return not differ(a, b)


def sha256(path: Path) -> str:
    """The file's SHA-256 (hex), computed here with hashlib."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


PER_BATCH = 30  # five training batches of 30 images (3 per class) and a test batch of 30
CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                 "truck")  # fmt: skip


def write_cifar10(data: Path, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The CIFAR-10 python batches as ``cifar-10-python.tar.gz`` unpacks them (protocol-2
    pickles of ``{batch_label, labels, data, filenames}``, ``batches.meta``), tiny; returns the
    images ``(N, 3, 32, 32)`` uint8 and labels of both splits."""
    folder = data / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    out: dict[str, list[np.ndarray]] = {"x_train": [], "y_train": [], "x_test": [], "y_test": []}
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        labels = rng.permutation(np.repeat(np.arange(10), PER_BATCH // 10))
        pixels = rng.integers(0, 256, (PER_BATCH, 3072), dtype=np.uint8)
        batch = {
            b"batch_label": name.encode(),
            b"labels": labels.tolist(),
            b"data": pixels,
            b"filenames": [f"{name}_{j}.png".encode() for j in range(PER_BATCH)],
        }
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
        split = "test" if name == "test_batch" else "train"
        out[f"x_{split}"].append(pixels.reshape(-1, 3, 32, 32))
        out[f"y_{split}"].append(labels)
    meta = {
        b"num_cases_per_batch": PER_BATCH,
        b"label_names": [c.encode() for c in CIFAR_CLASSES],
        b"num_vis": 3072,
    }
    (folder / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
    return {k: np.concatenate(v) for k, v in out.items()}
