"""Where pods run: `memory` (records only) or `podman` (a real container with sshd per pod)."""

from __future__ import annotations

from .base import BackendError, ContainerState, LaunchSpec, PodBackend

__all__ = ["BackendError", "ContainerState", "LaunchSpec", "PodBackend"]
