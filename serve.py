"""Start the dashboard with its default workspace warmed (what ``make run`` does).

``python serve.py [streamlit run options]`` is ``streamlit run app.py [options]`` plus one
background thread, started with the server, that does before the first visitor arrives what
the first page run would otherwise pay for: importing the library (torch, the HSIC engine,
plotly) and reading the default workspace (``$SDE_WORKSPACE``, else ``assets/demo``) — its
dataset, content hash and stored results at its defaults
(:func:`sde_core.services.cascade.warm_workspace`) — into the server's result cache, building
each kind of chart Explore draws once and drawing the target subsets at the defaults. A visitor
who arrives before it has finished waits only for what is left of it.

The thread imports no page module: ``pages/__init__.py`` must be first imported by a page run
(it ends Streamlit's legacy multipage mode there, docs/architecture.md).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def warm() -> None:
    """Warm the default workspace; a problem is printed (the page shows it to the visitor)."""
    t0 = time.perf_counter()
    path = os.environ.get("SDE_WORKSPACE", "assets/demo")
    try:
        from sde_core.errors import SDEError
        from sde_core.services.cascade import warm_workspace
    except ImportError as exc:  # a broken environment: the page reports it
        print(f"serve.py: not warmed ({exc})", file=sys.stderr, flush=True)
        return
    try:
        found = warm_workspace(path)
    except SDEError as exc:
        print(f"serve.py: {path} not warmed: {exc}", file=sys.stderr, flush=True)
        return
    what = "its stored results read" if found is not None else "no stored results at its defaults"
    print(f"serve.py: {path} warmed in {time.perf_counter() - t0:.1f} s ({what})", flush=True)


def main() -> None:
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    # Streamlit (with plotly and pandas) is imported before the warm-up thread starts: two
    # threads importing pandas and plotly at once in opposite orders could each get the other's
    # module half-initialised ("partially initialized module 'pandas' has no attribute
    # 'Series'"), which killed the server at start on a loaded machine (2 of 5 starts).
    from streamlit.web import cli

    threading.Thread(target=warm, name="sde-warm", daemon=True).start()

    sys.argv = ["streamlit", "run", str(ROOT / "app.py"), *sys.argv[1:]]
    sys.exit(cli.main())


if __name__ == "__main__":
    main()
