"""Helpers shared by several test folders (importable as ``helpers.<module>``: ``tests/`` is on
pytest's ``pythonpath``); a test module never imports another test module."""
