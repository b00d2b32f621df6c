"""Fixtures for the emulator's tests: emulator processes on 127.0.0.1 and SSH helpers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

EMULATOR_DIR = Path(__file__).resolve().parents[1]
if str(EMULATOR_DIR) not in sys.path:
    sys.path.insert(0, str(EMULATOR_DIR))

from runpod_emulator.testing import EmulatorProcess  # noqa: E402

GPU = "NVIDIA H100 80GB HBM3"


@pytest.fixture(scope="module")
def memory_emulator_module(tmp_path_factory: pytest.TempPathFactory):
    with EmulatorProcess(backend="memory", state_dir=tmp_path_factory.mktemp("memory-emu")) as emulator:
        yield emulator


@pytest.fixture
def memory_emulator(memory_emulator_module: EmulatorProcess) -> EmulatorProcess:
    """A running memory-backend emulator, reset before each test."""
    memory_emulator_module.admin("POST", "/_emulator/reset")
    return memory_emulator_module


def gpu_pod_body(name: str = "t-pod", **extra) -> dict:
    body = {"name": name, "image": "runpod/pytorch:2.8.0", "gpu": {"id": GPU, "count": 1}, "ports": ["22/tcp"]}
    body.update(extra)
    return body
