"""The pod state machine shared by the API and the engine: statuses, allowed actions, the API view."""

from __future__ import annotations

import secrets
import string
from typing import Any

from . import ledger, pricing
from .clock import to_rfc3339
from .store import Store

ACTIONS_BY_STATUS = {
    "PROVISIONING": ["stop", "terminate"],
    "STARTING": ["stop", "terminate"],
    "RUNNING": ["stop", "restart", "terminate"],
    "EXITED": ["start", "terminate"],
    "ERROR": ["start", "terminate"],
    "TERMINATED": [],
}
ACTIVE = pricing.ACTIVE_STATUSES
_ID_ALPHABET = string.ascii_lowercase + string.digits


def new_id(length: int = 14) -> str:
    return "".join(secrets.choice(_ID_ALPHABET) for _index in range(length))


def transition(store: Store, now: float, pod: dict[str, Any], status: str, reason: str = "") -> None:
    """Move `pod` to `status`: timestamps, SSH endpoint, ledger segment, a system log line, saved."""
    old = pod["status"]
    pod["status"] = status
    pod["status_since"] = now
    if status != "RUNNING":
        pod["ssh_port"] = None
        pod["ssh_ready"] = False
    if status == "RUNNING":
        pod["startedAt"] = now
    rates = pricing.pod_rates(pod, status)
    segments = pod["ledger"]
    current = segments[-1] if segments and segments[-1]["end"] is None else None
    if current is None or any(current.get(key) != value for key, value in rates.items()):
        ledger.open_segment(segments, now, rates)
    if status == "TERMINATED":
        ledger.close_segment(segments, now)
        pod["terminatedAt"] = now
    suffix = f" ({reason})" if reason else ""
    store.append_log(pod["id"], "system", f"pod status {old} -> {status}{suffix}", now)
    store.save_pod(pod)


def ssh_endpoint(pod: dict[str, Any]) -> dict[str, Any] | None:
    if (
        pod["status"] != "RUNNING"
        or not pod.get("ssh_ready")
        or not pod.get("ssh_port")
        or "22/tcp" not in pod["ports"]
    ):
        return None
    port = pod["ssh_port"]
    return {
        "host": "127.0.0.1",
        "port": port,
        "username": "root",
        "command": f"ssh root@127.0.0.1 -p {port}",
    }


def runtime_json(pod: dict[str, Any], now: float) -> dict[str, Any] | None:
    if pod["status"] != "RUNNING":
        return None
    ports = []
    for spec in pod["ports"]:
        number, _sep, kind = spec.partition("/")
        public = pod.get("ssh_port") if spec == "22/tcp" else None
        ports.append({"private": int(number), "public": public, "type": kind, "ip": "127.0.0.1" if public else None})
    gpus = [{"util": 0, "memoryUtil": 0} for _index in range(pod["gpu_effective_count"] if pod.get("gpu") else 0)]
    return {
        "uptime": max(0, int(now - pod["startedAt"])) if pod.get("startedAt") else 0,
        "gpus": gpus,
        "cpu": {"util": 0},
        "memory": {"util": 0},
        "ports": ports,
    }


def pod_json(pod: dict[str, Any], now: float) -> dict[str, Any]:
    """The pod as `GET /v2/pods/{id}` shows it."""
    body: dict[str, Any] = {
        "id": pod["id"],
        "name": pod["name"],
        "status": pod["status"],
        "actions": list(ACTIONS_BY_STATUS[pod["status"]]),
        "image": pod["image"],
        "args": pod["args"],
        "disk": pod["disk"],
        "mounts": pod["mounts"],
        "ports": pod["ports"],
        "env": pod["env"],
        "registry": pod["registry"],
        "cloud": pod["cloud"],
        "dataCenterId": pod["dataCenterId"],
        "cudaVersion": pod["cudaVersion"],
        "ssh": {"proxy": None, "direct": ssh_endpoint(pod)},
        "template": None,
        "cost": pricing.pod_cost(pod),
        "locked": pod["locked"],
        "globalNetworking": {"enabled": pod["globalNetworking"]},
        "runtime": runtime_json(pod, now),
        "createdAt": to_rfc3339(pod["createdAt"]),
        "startedAt": to_rfc3339(pod["startedAt"]) if pod.get("startedAt") else None,
    }
    if pod.get("gpu"):
        body["gpu"] = {"id": pod["gpu"]["id"], "count": pod["gpu_effective_count"]}
    else:
        body["cpu"] = dict(pod["cpu"])
    return body


def volume_json(volume: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": volume["id"],
        "name": volume["name"],
        "size": volume["size"],
        "dataCenter": volume["dataCenter"],
        "type": volume["type"],
    }
