"""A script of the repository (``reproduction/…``, ``bench/…``) imported by path as a module,
for the tests that check what it writes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_script(path: str, *, register: bool = False) -> ModuleType:
    """The module of the script at ``path`` (relative to the repository root), named after its
    file; ``register`` also puts it in ``sys.modules`` (a dataclass or pickle defined in the
    script looks its module up there)."""
    name = Path(path).stem
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
