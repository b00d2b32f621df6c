"""Helpers shared by the emulator's tests (a uniquely named module: every test dir has a conftest)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EMULATOR_DIR = Path(__file__).resolve().parents[1]
if str(EMULATOR_DIR) not in sys.path:
    sys.path.insert(0, str(EMULATOR_DIR))


GPU = "NVIDIA H100 80GB HBM3"


def gpu_pod_body(name: str = "t-pod", **extra) -> dict:
    body = {"name": name, "image": "runpod/pytorch:2.8.0", "gpu": {"id": GPU, "count": 1}, "ports": ["22/tcp"]}
    body.update(extra)
    return body


def podman(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(EMULATOR_DIR.parent / "config" / "containers.conf"))
    return subprocess.run(["podman", *args], capture_output=True, text=True, env=env, timeout=timeout_s, check=False)


def pod_image() -> str:
    tag = subprocess.run(
        [str(EMULATOR_DIR / "image" / "tag.sh")], capture_output=True, text=True, timeout=30, check=True
    ).stdout.strip()
    return f"localhost/trainops-pod:{tag}"


def require_podman_image() -> None:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    if podman("image", "exists", pod_image()).returncode != 0:
        pytest.fail(f"pod image {pod_image()} is missing: run `make image`")
