"""The library's layering (docs/architecture.md): no import cycle, no import up the layers.

Every ``import`` statement of every module under ``sde_core/`` counts, including those inside
functions (a deferred import is still a dependency).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "sde_core"

#: Layer of each top-level part of the package; a module may import its own layer and below.
LAYERS = {
    "errors": 0,
    "common": 0,
    "stats": 1,
    "inputs": 2,
    "families": 2,
    "learning": 3,
    "pipeline": 4,
    "viz": 5,
    "services": 5,
    "cli": 6,
    "__main__": 6,
}
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
    if len(parts) == 1:  # the package itself: its version only
        return None
    return LAYERS[parts[1]]


def test_every_module_has_a_layer() -> None:
    for module in library_modules():
        parts = module.split(".")
        assert len(parts) == 1 or parts[1] in LAYERS, module


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


#: Where imports of library names are checked (every Python file of the repository but .venv).
IMPORTERS = ("sde_core", "pages", "tests", "bench", "reproduction", "app.py", "serve.py")
#: The dashboard's facades (docs/architecture.md, "One import path per name"): the only modules
#: that re-export names, each a pipeline or inputs name a page needs, for the pages and app.py
#: only; library code, tests and scripts import those names from their defining modules.
FACADES = ("sde_core.services.cascade", "sde_core.services.workspace_info")


def defined_names(path: Path) -> set[str]:
    """Names a module binds itself at top level (def, class, assignment; inside top-level
    ``if``/``try`` blocks too), not the names it imports."""
    out: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(node.name)
            elif isinstance(node, ast.Assign):
                out.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                out.add(node.target.id)
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return out


def declared_all(path: Path) -> list[str] | None:
    """The literal ``__all__`` of a module (None when it has none)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return [ast.literal_eval(e) for e in node.value.elts]  # type: ignore[attr-defined]
    return None


def test_all_lists_only_what_the_module_defines() -> None:
    """One import path per name (docs/architecture.md): no module re-exports another's name."""
    wrong = [
        f"{module_name(path)}.__all__ lists {name}, which the module does not define"
        for path in sorted(ROOT.rglob("*.py"))
        if module_name(path) not in FACADES
        for name in sorted(set(declared_all(path) or ()) - defined_names(path))
    ]
    assert not wrong, "\n".join(wrong)


def test_a_facade_re_exports_only_pipeline_and_inputs_names() -> None:
    """What a facade lists but does not define comes from the pipeline or inputs layer (the
    layers a page must not import), never from services, viz or another facade."""
    for facade in FACADES:
        path = ROOT.parent.joinpath(*facade.split(".")).with_suffix(".py")
        source = {
            alias.name: node.module or ""
            for node in ast.parse(path.read_text(encoding="utf-8")).body
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
        }
        for name in sorted(set(declared_all(path) or ()) - defined_names(path)):
            owner = source.get(name, "")
            assert owner.split(".")[:2] in (["sde_core", "pipeline"], ["sde_core", "inputs"]), (
                f"{facade}.{name} comes from {owner or 'nowhere'}"
            )


def test_each_class_and_function_is_exported_by_one_module() -> None:
    owners: dict[int, list[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        name = module_name(path)
        if name in FACADES:
            continue
        module = importlib.import_module(name)
        for item in getattr(module, "__all__", ()):
            obj = getattr(module, item)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                owners.setdefault(id(obj), []).append(f"{name}.{item}")
                assert obj.__module__ == name, f"{name}.{item} is {obj.__module__}.{item}"
    shared = [paths for paths in owners.values() if len(paths) > 1]
    assert not shared, shared


def test_every_import_of_a_library_name_names_its_defining_module() -> None:
    """``from sde_core.X import n`` anywhere in the repository: n is a submodule of X or is
    defined in X (never re-exported by it)."""
    repo = ROOT.parent
    files: list[Path] = []
    for top in IMPORTERS:
        where = repo / top
        files += [where] if where.suffix == ".py" else sorted(where.rglob("*.py"))
    cache: dict[str, set[str]] = {}
    wrong = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module):
                continue
            if node.module.split(".")[0] != "sde_core":
                continue
            if node.module in FACADES and path.relative_to(repo).parts[0] in ("pages", "app.py"):
                continue  # the dashboard's facades: checked by the test above
            base = ROOT.parent.joinpath(*node.module.split("."))
            source = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
            if node.module not in cache:
                cache[node.module] = defined_names(source)
            for alias in node.names:
                submodule = base / alias.name
                if submodule.is_dir() or submodule.with_suffix(".py").exists():
                    continue
                if alias.name not in cache[node.module]:
                    wrong.append(
                        f"{path.relative_to(repo)}:{node.lineno}: {node.module}.{alias.name}"
                    )
    assert not wrong, "imported from a module that does not define them:\n" + "\n".join(wrong)


def test_import_sde_core_is_light() -> None:
    """``import sde_core`` loads no other module of the library and no heavy dependency."""
    code = (
        "import sys, sde_core; heavy = ('torch', 'numpy', 'scipy', 'pandas', 'numba');"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or "
        "m.startswith('sde_core.')))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT.parent)}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "[]", out.stdout


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
