"""Fixtures for the emulator's tests: emulator processes on 127.0.0.1 and an SSH key.

Helpers live in emulator_helpers.py: test modules import from there, never from `conftest`
(several test directories have a conftest.py and only one can be the module `conftest`).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from emulator_helpers import require_podman_image
from runpod_emulator.testing import EmulatorProcess


@pytest.fixture(scope="module")
def memory_emulator_module(tmp_path_factory: pytest.TempPathFactory):
    with EmulatorProcess(backend="memory", state_dir=tmp_path_factory.mktemp("memory-emu")) as emulator:
        yield emulator


@pytest.fixture
def memory_emulator(memory_emulator_module: EmulatorProcess) -> EmulatorProcess:
    """A running memory-backend emulator, reset before each test."""
    memory_emulator_module.admin("POST", "/_emulator/reset")
    return memory_emulator_module


@pytest.fixture(scope="session")
def ssh_keypair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A throwaway ed25519 key: (private key path, public key line)."""
    directory = tmp_path_factory.mktemp("ssh")
    key = directory / "id_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "emulator-test", "-f", str(key)],
        check=True,
        timeout=30,
    )
    return key, key.with_suffix(".pub").read_text().strip()


@pytest.fixture(scope="module")
def podman_emulator(tmp_path_factory: pytest.TempPathFactory, ssh_keypair):
    require_podman_image()
    state = tmp_path_factory.mktemp("podman-emu")
    with EmulatorProcess(backend="podman", state_dir=state, extra_args=["--container-prefix", "rpemu-test"]) as emu:
        emu.admin("PUT", "/v2/account/ssh-keys", {"keys": [ssh_keypair[1]]})
        yield emu
