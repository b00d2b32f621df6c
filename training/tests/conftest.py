"""Fixtures for the trainer tests."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
from trainer_harness import process_log, run_trainer, write_config


@pytest.fixture(scope="session")
def reference_runs(tmp_path_factory):
    """Uninterrupted runs, one per (config, nproc), shared by every test that compares against them."""
    cache: dict[str, pathlib.Path] = {}

    def get(nproc: int = 1, **overrides: Any) -> pathlib.Path:
        key = json.dumps([nproc, overrides], sort_keys=True)
        if key not in cache:
            base = tmp_path_factory.mktemp("reference")
            config = write_config(base, **overrides)
            rc = run_trainer(config, base / "run", nproc)
            assert rc == 0, process_log(base / "run")
            cache[key] = base / "run"
        return cache[key]

    return get
