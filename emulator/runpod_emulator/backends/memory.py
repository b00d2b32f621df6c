"""The `memory` backend: the API and state machine without containers, for fast tests.

A running pod's SSH endpoint points to a loopback port that nothing listens on.
"""

from __future__ import annotations

import socket

from .base import ContainerState, LaunchSpec


def unused_loopback_port() -> int:
    """A port that was free a moment ago; nothing of ours will listen on it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class MemoryBackend:
    name = "memory"
    instant = True

    def __init__(self, provision_s: float = 0.2, start_s: float = 0.2) -> None:
        self.provision_s = provision_s
        self.start_s = start_s
        # Last port per pod: a start must never hand out the same port again (as on RunPod).
        self._last_port: dict[str, int] = {}

    def check_pod(self, body: dict) -> list[str]:
        return []

    def launch(self, spec: LaunchSpec) -> None:
        return None

    def wait_running(self, pod_id: str, timeout_s: float) -> int | None:
        port = unused_loopback_port()
        while port == self._last_port.get(pod_id):
            port = unused_loopback_port()
        self._last_port[pod_id] = port
        return port

    def probe_ssh(self, port: int) -> bool:
        # No sshd exists here; the endpoint is reported as soon as the pod runs.
        return True

    def remove(self, pod_id: str) -> None:
        return None

    def kill(self, pod_id: str, grace_s: float) -> int | None:
        return None

    def list_containers(self) -> dict[str, ContainerState] | None:
        return None

    def remove_container(self, container_id: str) -> None:
        return None

    def container_logs(self, pod_id: str) -> list[tuple[float, str]]:
        return []
