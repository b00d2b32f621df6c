"""Fixtures for tests that run real containers from the local pod image."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import uuid

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# runpod_emulator.testing holds the SSH helper every pod test shares.
if str(ROOT / "emulator") not in sys.path:
    sys.path.insert(0, str(ROOT / "emulator"))


@pytest.fixture(scope="session")
def pod_image() -> str:
    """The tag of the local pod image; `make image` builds it (make test does)."""
    if shutil.which("podman") is None:
        pytest.fail("podman is not installed: run `make setup`")
    os.environ.setdefault("CONTAINERS_CONF", str(ROOT / "config" / "containers.conf"))
    tag = subprocess.run(
        [str(ROOT / "emulator" / "image" / "tag.sh")], check=True, capture_output=True, text=True
    ).stdout.strip()
    image = f"localhost/trainops-pod:{tag}"
    if subprocess.run(["podman", "image", "exists", image], check=False).returncode != 0:
        pytest.fail(f"{image} is missing: run `make image`")
    return image


@pytest.fixture
def ssh_keypair(tmp_path: pathlib.Path) -> tuple[pathlib.Path, str]:
    """A freshly generated ed25519 key pair: (private key path, public key line)."""
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "trainops-test", "-f", str(key)], check=True)
    return key, key.with_suffix(".pub").read_text().strip()


@pytest.fixture
def container_name():
    """A unique container name, removed after the test whatever happened."""
    name = f"trainops-test-{uuid.uuid4().hex[:10]}"
    yield name
    subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True, check=False)
