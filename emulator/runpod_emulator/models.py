"""The emulator's records as typed models: a pod, a network volume, and how each looks to the API and on disk.

Each model keeps what the API shows (its own fields) apart from what only the emulator needs (`internal`:
generations, container and SSH state, the cost ledger), and renders itself: `to_api()` is the JSON the v2
API returns, `to_record()` / `from_record()` the flat JSON object stored per record. The record format is
the one the emulator has always written (API fields in camelCase, a pod's internal fields in snake_case,
all at the top level), so state directories written before these models existed load unchanged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from .clock import to_rfc3339
from .ledger import Segments

ACTIONS_BY_STATUS = {
    "PROVISIONING": ["stop", "terminate"],
    "STARTING": ["stop", "terminate"],
    "RUNNING": ["stop", "restart", "terminate"],
    "EXITED": ["start", "terminate"],
    "ERROR": ["start", "terminate"],
    "TERMINATED": [],
}
# The statuses in which a pod holds compute (and is billed for it, pricing.py).
ACTIVE = ("PROVISIONING", "STARTING", "RUNNING")
SSH_PORT = "22/tcp"
# The API's mounts object as validated: {"persistent": {size, path}} or {"network": [{volumeId, path}]}.
Mounts = dict[str, Any]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.capitalize() for word in rest)


class Record:
    """A dataclass stored as one JSON object: a key per field, camelCase unless CAMEL_KEYS is False.

    A field's metadata may name its key ({"key": name}), or give the Record class of its value: stored as
    an object under its key ({"nested": cls}, the value may be None), or at this record's top level
    ({"flattened": cls}).
    """

    CAMEL_KEYS: ClassVar[bool] = True

    @classmethod
    def _key(cls, spec: dataclasses.Field[Any]) -> str:
        return spec.metadata.get("key") or (_camel(spec.name) if cls.CAMEL_KEYS else spec.name)

    def to_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {}
        for spec in dataclasses.fields(self):
            value = getattr(self, spec.name)
            if "flattened" in spec.metadata:
                record.update(value.to_record())
            elif "nested" in spec.metadata:
                record[self._key(spec)] = None if value is None else value.to_record()
            else:
                record[self._key(spec)] = value
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Self:
        """The model of a stored record; a key the record lacks takes the field's default (older records)."""
        values: dict[str, Any] = {}
        for spec in dataclasses.fields(cls):
            key = cls._key(spec)
            if "flattened" in spec.metadata:
                values[spec.name] = spec.metadata["flattened"].from_record(record)
            elif key not in record and (
                spec.default is not dataclasses.MISSING or spec.default_factory is not dataclasses.MISSING
            ):
                continue
            elif "nested" in spec.metadata:
                values[spec.name] = None if record[key] is None else spec.metadata["nested"].from_record(record[key])
            else:
                values[spec.name] = record[key]
        return cls(**values)


# Pods ------------------------------------------------------------------------------------------------------


@dataclass
class PodGpu(Record):
    """The GPUs asked for at create (the API shows the effective count: see PodInternal)."""

    id: str
    count: int


@dataclass
class PodCpu(Record):
    id: str
    vcpu_count: int
    memory: int  # GB

    def to_api(self) -> dict[str, Any]:
        return self.to_record()


@dataclass
class PodInternal(Record):
    """What only the emulator knows of a pod; stored under snake_case keys beside the API fields."""

    CAMEL_KEYS: ClassVar[bool] = False

    status_since: float
    # Incarnation: every stop, start, restart or host failure bumps it; the engine applies a backend
    # result only while it is unchanged, and a container of another gen is stale.
    gen: int = 1
    ledger: Segments = field(default_factory=list)
    terminated_at: float | None = field(default=None, metadata={"key": "terminatedAt"})
    # GPUs the container gets: gpu.count, or 0 after an admin restart without GPUs until the next start.
    gpu_effective_count: int = 0
    gpu_name: str | None = None
    gpu_memory_mib: int | None = None
    # The account's keys, handed to the container as PUBLIC_KEY when startSsh asked for them.
    ssh_public_key: str | None = None
    # Whether the engine waits for sshd (a key is set and 22/tcp is exposed).
    ssh_wanted: bool = False
    container_present: bool = False
    container_gen: int | None = None
    ssh_port: int | None = None
    ssh_ready: bool = False
    ssh_deadline: float = 0.0
    ssh_next_probe: float = 0.0
    # A terminated pod whose data is gone: kept only for the billing ledger, never touched again.
    inert: bool = False
    # Whether the pod's host has a public IP (catalog.DataCenter.public_ip): without, 22/tcp is not published.
    public_ip: bool = True


@dataclass
class Pod(Record):
    """A pod: the fields `GET /v2/pods/{id}` shows (some rendered: times, gpu count, ssh), then `internal`."""

    id: str
    name: str
    image: str
    args: str
    disk: int
    env: dict[str, str]
    ports: list[str]
    registry: str | None
    cloud: str
    data_center_id: str
    cuda_version: str | None
    gpu: PodGpu | None = field(metadata={"nested": PodGpu})
    cpu: PodCpu | None = field(metadata={"nested": PodCpu})
    mounts: Mounts
    locked: bool
    global_networking: bool
    created_at: float
    started_at: float | None
    status: str
    internal: PodInternal = field(metadata={"flattened": PodInternal})

    @property
    def terminated(self) -> bool:
        return self.status == "TERMINATED"

    @property
    def gpu_count(self) -> int:
        """GPUs the pod has now (0 for a CPU pod)."""
        return self.internal.gpu_effective_count if self.gpu else 0

    @property
    def exposes_ssh(self) -> bool:
        """Whether 22/tcp gets a public port: it is in `ports` and the host has a public IP."""
        return SSH_PORT in self.ports and self.internal.public_ip

    def refresh_ssh_wanted(self) -> None:
        self.internal.ssh_wanted = bool(self.internal.ssh_public_key or "PUBLIC_KEY" in self.env) and self.exposes_ssh

    def network_volume_ids(self) -> list[str]:
        return [mount["volumeId"] for mount in self.mounts.get("network", [])]

    def ssh_endpoint(self) -> dict[str, Any] | None:
        port = self.internal.ssh_port
        if self.status != "RUNNING" or not self.internal.ssh_ready or not port or not self.exposes_ssh:
            return None
        return {"host": "127.0.0.1", "port": port, "username": "root", "command": f"ssh root@127.0.0.1 -p {port}"}

    def runtime_api(self, now: float) -> dict[str, Any] | None:
        if self.status != "RUNNING":
            return None
        ports = []
        for spec in self.ports:
            number, _sep, kind = spec.partition("/")
            public = self.internal.ssh_port if spec == SSH_PORT else None
            ip = "127.0.0.1" if public else None
            ports.append({"private": int(number), "public": public, "type": kind, "ip": ip})
        return {
            "uptime": max(0, int(now - self.started_at)) if self.started_at else 0,
            "gpus": [{"util": 0, "memoryUtil": 0} for _index in range(self.gpu_count)],
            "cpu": {"util": 0},
            "memory": {"util": 0},
            "ports": ports,
        }

    def to_api(self, now: float, cost: float) -> dict[str, Any]:
        """The pod as `GET /v2/pods/{id}` shows it; `cost` is its USD per hour now (pricing.pod_cost)."""
        body: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "status": self.status,
            "actions": list(ACTIONS_BY_STATUS[self.status]),
            "image": self.image,
            "args": self.args,
            "disk": self.disk,
            "mounts": self.mounts,
            "ports": self.ports,
            "env": self.env,
            "registry": self.registry,
            "cloud": self.cloud,
            "dataCenterId": self.data_center_id,
            "cudaVersion": self.cuda_version,
            "ssh": {"proxy": None, "direct": self.ssh_endpoint()},
            "template": None,
            "cost": cost,
            "locked": self.locked,
            "globalNetworking": {"enabled": self.global_networking},
            "runtime": self.runtime_api(now),
            "createdAt": to_rfc3339(self.created_at),
            "startedAt": to_rfc3339(self.started_at) if self.started_at else None,
        }
        if self.gpu:
            body["gpu"] = {"id": self.gpu.id, "count": self.internal.gpu_effective_count}
        elif self.cpu:
            body["cpu"] = self.cpu.to_api()
        return body


# Network volumes -------------------------------------------------------------------------------------------


@dataclass
class VolumeInternal(Record):
    """What only the emulator knows of a network volume (stored under camelCase keys)."""

    created_at: float
    deleted_at: float | None = None
    ledger: Segments = field(default_factory=list)


@dataclass
class NetworkVolume(Record):
    id: str
    name: str
    size: int  # GB
    data_center: str
    type: str  # STANDARD or HIGH_PERFORMANCE
    internal: VolumeInternal = field(metadata={"flattened": VolumeInternal})

    @property
    def deleted(self) -> bool:
        return self.internal.deleted_at is not None

    def to_api(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "size": self.size, "dataCenter": self.data_center, "type": self.type}
