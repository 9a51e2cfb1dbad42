"""The wheel is complete: plan catalog and ``py.typed`` ship, and the CLI runs from the install.

Builds the wheel from a copy of the sources (so the checkout gets no ``build/`` folder), installs
it with ``--target`` into a temporary folder and runs ``python -m sde_core run-plan table1
--dry-run`` from another folder, with only that install (and the interpreter's site-packages for
the dependencies, but not the checkout or an editable install) on the path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CATALOG = sorted(p.name for p in (ROOT / "sde_core/pipeline/plans/catalog").glob("*.toml"))


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "sde_core", src / "sde_core", ignore=shutil.ignore_patterns("__pycache__")
    )
    out = tmp_path_factory.mktemp("wheel")
    _run(
        [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation",
         "--no-index", "--quiet", "-w", str(out)],
        cwd=src,
    )  # fmt: skip
    (found,) = out.glob("sde_explorer-*.whl")
    return found


def test_wheel_ships_plan_catalog_and_type_marker(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "sde_core/py.typed" in names
    assert CATALOG, "the checkout has no plan TOMLs"
    shipped = sorted(
        Path(n).name for n in names if n.startswith("sde_core/pipeline/plans/catalog/")
    )
    assert shipped == CATALOG
    assert "sde_core/__main__.py" in names


def test_installed_wheel_runs_a_plan_dry_run_elsewhere(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    _run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
         "--target", str(target), str(wheel)],
        cwd=tmp_path,
    )  # fmt: skip
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # -S: no site module, so no .pth file (an editable install of the checkout) is processed;
    # the dependencies come from the interpreter's site-packages, named explicitly.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = os.pathsep.join([str(target), sysconfig.get_paths()["purelib"]])
    python = [sys.executable, "-S"]
    where = _run([*python, "-c", "import sde_core; print(sde_core.__file__)"], elsewhere, env)
    assert Path(where.strip()).is_relative_to(target)
    out = _run([*python, "-m", "sde_core", "run-plan", "table1", "--dry-run"], elsewhere, env)
    assert out.startswith("plan table1 ["), out
    assert " jobs {" in out.splitlines()[0]
