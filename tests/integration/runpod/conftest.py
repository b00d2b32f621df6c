"""Fixtures for the RunPod integration tests; the helpers they use are in runpod_integration_helpers.py."""

from __future__ import annotations

import json

import pytest
from runpod_integration_helpers import EmulatorProcess, spec_path


@pytest.fixture(scope="session")
def memory_emulator(tmp_path_factory):
    with EmulatorProcess(backend="memory", state_dir=tmp_path_factory.mktemp("runpod-emulator")) as emulator:
        yield emulator


@pytest.fixture
def emulator(memory_emulator):
    """The session's memory emulator, emptied: no pods, volumes, keys, faults or recorded requests."""
    memory_emulator.admin("POST", "/_emulator/reset")
    memory_emulator.admin("DELETE", "/_emulator/faults")
    memory_emulator.admin("DELETE", "/_emulator/requests")
    return memory_emulator


@pytest.fixture(scope="session")
def openapi():
    path = spec_path()
    if path is None:
        pytest.skip("RunPod's openapi-v2.json is not present beside this checkout")
    from openapi_core import OpenAPI

    return OpenAPI.from_dict(json.loads(path.read_text()))
