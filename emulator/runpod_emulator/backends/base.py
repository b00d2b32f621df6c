"""The interface between the engine (state machine) and whatever runs a pod's container."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


class BackendError(RuntimeError):
    """A container operation failed; the message says which and why."""


@dataclass
class LaunchSpec:
    """Everything needed to start one incarnation (`gen`) of a pod's container."""

    pod_id: str
    gen: int
    env: dict[str, str]
    publish_ssh: bool
    # (host directory, path inside the container, read-only)
    mounts: list[tuple[Path, str, bool]] = field(default_factory=list)
    # The pod's `image` as the API has it: the podman backend picks the local image for it (IMAGE_VARIANTS).
    image: str = ""


@dataclass
class ContainerState:
    pod_id: str
    gen: int | None
    running: bool
    container_id: str = ""


class PodBackend(Protocol):
    name: str
    # Minimum seconds a pod spends in PROVISIONING and in STARTING, so each state can be observed.
    provision_s: float
    start_s: float
    # True when operations return at once: the engine then runs them inline instead of in its pool.
    instant: bool

    def check_pod(self, body: dict) -> list[str]:
        """What this backend cannot run in a create or update body that RunPod's schema allows: one
        `<json path>: <message>` per violation (answered 422); none for the memory backend."""

    def launch(self, spec: LaunchSpec) -> None:
        """Create and start the pod's container (replacing any stale one of the same name)."""

    def wait_running(self, pod_id: str, timeout_s: float) -> int | None:
        """Wait until the container runs; return the host port published for 22/tcp (None if none)."""

    def probe_ssh(self, port: int) -> bool:
        """Whether an SSH server answers with its banner on 127.0.0.1:port."""

    def remove(self, pod_id: str) -> None:
        """Remove the pod's container (its disk goes with it); no error when there is none."""

    def kill(self, pod_id: str, grace_s: float) -> int | None:
        """Host failure: SIGTERM, SIGKILL after `grace_s`, then remove the container; its exit code."""

    def list_containers(self) -> dict[str, ContainerState] | None:
        """This emulator's containers by pod id; None when the backend has no containers."""

    def remove_container(self, container_id: str) -> None:
        """Remove one of this emulator's containers by its id (orphans may have any name)."""

    def container_logs(self, pod_id: str) -> list[tuple[float, str]]:
        """(epoch, line) of the pod's current container output."""
