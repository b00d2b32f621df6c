"""Helpers shared by the emulator's tests (a uniquely named module: every test dir has a conftest)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from runpod_emulator.backends.podman import default_image
from runpod_emulator.doctor import DoctorFailure, ensure_pods_can_run

EMULATOR_DIR = Path(__file__).resolve().parents[1]


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
    return default_image()


def require_podman_image() -> None:
    """Fail with `make doctor`'s message (naming the missing piece) unless pods can run here."""
    try:
        ensure_pods_can_run()
    except DoctorFailure as exc:
        pytest.fail(str(exc), pytrace=False)
