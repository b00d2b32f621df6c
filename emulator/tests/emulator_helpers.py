"""Helpers shared by the emulator's tests (a uniquely named module: every test dir has a conftest)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
from runpod_emulator.backends.podman import default_image
from runpod_emulator.doctor import DoctorFailure, ensure_pods_can_run

EMULATOR_DIR = Path(__file__).resolve().parents[1]


GPU = "NVIDIA H100 80GB HBM3"

# (method, path template) of every operation the emulator implements.
IMPLEMENTED = {
    ("GET", "/v2/pods"),
    ("POST", "/v2/pods"),
    ("GET", "/v2/pods/{id}"),
    ("PATCH", "/v2/pods/{id}"),
    ("DELETE", "/v2/pods/{id}"),
    ("POST", "/v2/pods/{id}/action"),
    ("GET", "/v2/pods/{id}/logs"),
    ("GET", "/v2/network-volumes"),
    ("POST", "/v2/network-volumes"),
    ("GET", "/v2/network-volumes/{id}"),
    ("PATCH", "/v2/network-volumes/{id}"),
    ("DELETE", "/v2/network-volumes/{id}"),
    ("GET", "/v2/account/ssh-keys"),
    ("PUT", "/v2/account/ssh-keys"),
    ("GET", "/v2/catalog/gpus"),
    ("GET", "/v2/catalog/gpus/{id}"),
    ("GET", "/v2/catalog/cpus"),
    ("GET", "/v2/catalog/cpus/{id}"),
    ("GET", "/v2/catalog/datacenters"),
    ("GET", "/v2/catalog/datacenters/{id}"),
    ("GET", "/v2/billing/pods"),
    ("GET", "/v2/billing/network-volumes"),
}


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


def read_events(port: int, api_key: str, path: str, want: int, extra_headers: str = "", timeout_s: float = 5):
    """Open an SSE stream, return (status line, the first `want` events) and close it."""
    events: list[tuple[str, dict]] = []
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as conn:
        conn.sendall(
            f"GET {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {api_key}\r\n{extra_headers}\r\n".encode()
        )
        buffer = b""
        deadline = time.monotonic() + timeout_s
        while len(events) < want and time.monotonic() < deadline:
            try:
                chunk = conn.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            buffer += chunk
            head, _sep, stream = buffer.partition(b"\r\n\r\n")
            events = []
            for block in stream.decode().split("\n\n"):
                lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and line[0] != ":")
                if "id" in lines and "data" in lines:
                    events.append((lines["id"], json.loads(lines["data"])))
    return head.decode().splitlines()[0], events
