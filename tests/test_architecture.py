"""The library's layering (docs/architecture.md): no import cycle, no import up the layers.

Every ``import`` statement of every module under ``sde_core/`` counts, including those inside
functions (a deferred import is still a dependency).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "sde_core"

#: Layer of each top-level part of the package; a module may import its own layer and below.
LAYERS = {
    "errors": 0,
    "common": 0,
    "stats": 1,
    "inputs": 2,
    "learning": 3,
    "pipeline": 4,
    "viz": 5,
    "services": 5,
    "cli": 6,
    "__main__": 6,
}
#: Stable public import paths: thin re-exports that nothing inside the library imports.
STABLE = ("hsic", "decision", "baselines", "models", "data", "evaluate", "workspace", "store")
#: Third-party packages each layer may import (beyond the standard library and lower layers).
THIRD_PARTY = {
    0: {"numpy"},
    1: {"numpy", "scipy", "numba", "threadpoolctl"},
}
#: Imported inside functions only, for an optional path (the HSIC engine's torch device path).
DEFERRED_OK = {1: {"torch"}}
FORBIDDEN_EVERYWHERE = {"streamlit"}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, top_level_only: bool = False) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = ast.iter_child_nodes(tree) if top_level_only else ast.walk(tree)
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            out.add(mod)
            # ``from package import module`` imports the module too
            out.update(f"{mod}.{alias.name}" for alias in node.names)
    return out


def library_modules() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        graph[name] = {m for m in imports_of(path) if m in modules and m != name}
    return graph


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) == 1:  # the package itself: lazy re-exports only
        return None
    if parts[1] in STABLE:
        return 7
    return LAYERS[parts[1]]


def test_every_module_has_a_layer() -> None:
    for module in library_modules():
        parts = module.split(".")
        assert len(parts) == 1 or parts[1] in LAYERS or parts[1] in STABLE, module


def test_no_import_goes_up_the_layers() -> None:
    graph = library_modules()
    wrong = [
        f"{src} (layer {layer_of(src)}) imports {dst} (layer {layer_of(dst)})"
        for src, deps in graph.items()
        for dst in deps
        if layer_of(src) is not None
        and layer_of(dst) is not None
        and layer_of(dst) > layer_of(src)
        and not dst.endswith("__init__")
    ]
    assert not wrong, "\n".join(sorted(wrong))


def test_nothing_inside_imports_the_stable_re_exports() -> None:
    graph = library_modules()
    users = [
        f"{src} imports {dst}"
        for src, deps in graph.items()
        for dst in deps
        if layer_of(dst) == 7 and layer_of(src) != 7
    ]
    assert not users, "\n".join(users)


def test_no_import_cycle() -> None:
    graph = library_modules()
    # package __init__ modules re-export their children: an edge child -> package is not a cycle
    # unless the child really needs the package's own code, which none of ours has.
    edges = {src: {d for d in deps if not src.startswith(d + ".")} for src, deps in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize("layer", sorted(THIRD_PARTY))
def test_low_layers_import_only_their_allowed_packages(layer: int) -> None:
    import sys

    allowed = THIRD_PARTY[layer] | set(sys.stdlib_module_names) | {"sde_core", "__future__"}
    for path in ROOT.rglob("*.py"):
        name = module_name(path)
        if layer_of(name) != layer:
            continue
        top_level = imports_of(path, top_level_only=True)
        for imported in imports_of(path):
            top = imported.split(".")[0]
            ok = top in allowed or (
                top in DEFERRED_OK.get(layer, set()) and imported not in top_level
            )
            assert ok, f"{name} imports {imported} (layer {layer} allows {THIRD_PARTY[layer]})"


def test_the_library_never_imports_the_ui() -> None:
    for path in ROOT.rglob("*.py"):
        for imported in imports_of(path):
            assert imported.split(".")[0] not in FORBIDDEN_EVERYWHERE, (path, imported)


@pytest.mark.parametrize(
    ("path", "names"),
    [
        ("sde_core.hsic", ["split_half_hsic", "hsic", "resolve_sigma"]),
        ("sde_core.decision", ["jsd", "decide", "reference_check", "calibrated_verdict"]),
        ("sde_core.baselines", ["nearest_reference_batch"]),
        ("sde_core.models", ["load_checkpoint", "build_model", "save_checkpoint"]),
        ("sde_core.data", ["load_dataset", "load_index_file", "DatasetSpec"]),
        ("sde_core.evaluate", ["EvalSettings", "evaluate_workspace", "ALGORITHM_VERSION"]),
        ("sde_core.workspace", ["load_workspace", "Workspace", "ModelEntry"]),
        ("sde_core.store", ["ResultsStore", "workspace_store_path"]),
        ("sde_core.errors", ["SDEError", "CheckpointError", "EngineError", "ExportError"]),
        ("sde_core", ["split_half_hsic", "evaluate_workspace", "SDEError", "__version__"]),
    ],
)
def test_stable_import_paths(path: str, names: list[str]) -> None:
    module = importlib.import_module(path)
    for name in names:
        assert getattr(module, name) is not None, f"{path}.{name}"
    if path != "sde_core":
        assert set(names) <= set(module.__all__)


# ------------------------------------------------------------------------- the dashboard
APP = ROOT.parent
#: The dashboard's scripts: the entry point and every page module.
UI_FILES = [APP / "app.py", *sorted((APP / "pages").glob("*.py"))]
#: What the dashboard may import from the library: the services and viz layers (pages hold
#: widgets and layout only), the layer-0 helpers and errors, and ``sde_core`` itself (its
#: version).
UI_ALLOWED = {"services", "viz", "common", "errors"}


def test_the_dashboard_imports_services_and_viz_only() -> None:
    assert len(UI_FILES) > 5, UI_FILES
    wrong = [
        f"{path.relative_to(APP)} imports {imported}"
        for path in UI_FILES
        for imported in imports_of(path)
        if imported.startswith("sde_core.") and imported.split(".")[1] not in UI_ALLOWED
    ]
    assert not wrong, "\n".join(sorted(wrong))


def test_every_page_imports_the_pages_package() -> None:
    """A fresh server's first request of a page ends Streamlit's legacy multipage mode when the
    page imports the ``pages`` package (pages/__init__.py): at the top of the module, before
    the page draws anything."""
    for path in UI_FILES:
        if path.parent.name != "pages" or path.name == "__init__.py":
            continue
        top = imports_of(path, top_level_only=True)
        assert any(m == "pages" or m.startswith("pages.") for m in top), path.name
