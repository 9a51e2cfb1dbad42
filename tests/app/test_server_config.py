"""What `make run` serves with (``.streamlit/config.toml``, read by Streamlit at start): bound
to this machine, headless, no usage statistics, no developer toolbar — and no file watcher,
which on a fresh clone watched ``.venv`` too and kept the server at 100% of a core."""

from __future__ import annotations

import tomllib
from pathlib import Path

CONFIG = Path(__file__).resolve().parents[2] / ".streamlit" / "config.toml"


def test_the_dashboard_is_served_without_a_file_watcher() -> None:
    config = tomllib.loads(CONFIG.read_text(encoding="utf-8"))
    assert config["server"]["fileWatcherType"] == "none"
    assert config["server"]["address"] == "localhost" and config["server"]["headless"] is True
    assert config["browser"]["gatherUsageStats"] is False
    assert config["client"]["toolbarMode"] == "viewer"


def test_streamlit_reads_the_setting() -> None:
    """The option exists under this name in the installed Streamlit (a renamed option would
    be ignored with only a warning)."""
    from streamlit import config

    assert "server.fileWatcherType" in config._config_options_template
