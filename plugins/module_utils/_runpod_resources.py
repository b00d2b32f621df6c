# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure helpers over RunPod API dicts: the shapes modules return, pod names, SSH key lines."""

from __future__ import annotations

import re

from ansible_collections.trainops.gpu.plugins.module_utils._runpod import (
    TERMINATED,
    pod_ssh_endpoint,
)

DEFAULT_NAME_PREFIX = "trainops"

# The env entry every pod create carries: a client token, unique per create, that RunPod stores and returns
# with the pod, so a create whose answer was lost is found again by it (never guessed from the name alone).
CREATE_TOKEN_ENV = "TRAINOPS_CREATE_TOKEN"

# authorized_keys-style line, as UpdateSshKeysRequest accepts it: <type> <base64-key> [comment].
SSH_KEY_PATTERN = re.compile(r"^(ssh|ecdsa|sk)-[^\s]+ [^\s]+([ \t][^\n\r]*)?$")


def pod_summary(pod) -> dict:
    """The snake_case view of a pod that modules return.

    Environment variable values are left out on purpose (they may hold secrets): only their names.
    """
    if not pod:
        return {}
    gpu = pod.get("gpu") or {}
    cpu = pod.get("cpu") or {}
    mounts = pod.get("mounts") or {}
    persistent = mounts.get("persistent") or None
    network = (mounts.get("network") or [None])[0]
    endpoint = pod_ssh_endpoint(pod)
    direct = ((pod.get("ssh") or {}).get("direct")) or {}
    return {
        "id": pod.get("id"),
        "name": pod.get("name"),
        "status": pod.get("status"),
        "actions": list(pod.get("actions") or []),
        "image": pod.get("image"),
        "gpu_type": gpu.get("id"),
        "gpu_count": gpu.get("count") if gpu else None,
        "cpu_flavor": cpu.get("id"),
        "vcpu_count": cpu.get("vcpuCount"),
        "cloud": pod.get("cloud"),
        "data_center_id": pod.get("dataCenterId"),
        "cuda_version": pod.get("cudaVersion"),
        "container_disk": pod.get("disk"),
        "ports": list(pod.get("ports") or []),
        "env_keys": sorted(k for k in (pod.get("env") or {}) if k != CREATE_TOKEN_ENV),
        "persistent_volume": dict(size=persistent.get("size"), path=persistent.get("path")) if persistent else None,
        "network_volume": dict(id=network.get("volumeId"), path=network.get("path")) if network else None,
        "ssh_host": endpoint[0] if endpoint else None,
        "ssh_port": endpoint[1] if endpoint else None,
        "ssh_user": endpoint[2] if endpoint else None,
        "ssh_command": direct.get("command"),
        "cost_per_hr": pod.get("cost"),
        "locked": pod.get("locked"),
        "created_at": pod.get("createdAt"),
        "started_at": pod.get("startedAt"),
    }


def volume_summary(volume) -> dict:
    if not volume:
        return {}
    return {
        "id": volume.get("id"),
        "name": volume.get("name"),
        "size": volume.get("size"),
        "data_center": volume.get("dataCenter"),
        "type": volume.get("type"),
    }


def select_pods(pods, name=None, name_prefix=None, statuses=None, include_terminated=False) -> list:
    """The pods that pass every filter given, sorted by name then id.

    ``name`` is an exact name, ``name_prefix`` a start of name. ``statuses`` keeps pods in those statuses;
    without statuses every status is kept, TERMINATED only with ``include_terminated`` (for most callers a
    terminated pod is history, not a match: the inventory keeps it when its ``statuses`` is empty).
    """
    wanted = frozenset(statuses or ())

    def status_ok(status):
        if wanted:
            return status in wanted
        return include_terminated or status != TERMINATED

    selected = [
        pod
        for pod in pods
        if status_ok(pod.get("status"))
        and (name is None or pod.get("name") == name)
        and (not name_prefix or (pod.get("name") or "").startswith(name_prefix))
    ]
    return sorted(selected, key=lambda p: (p.get("name") or "", p.get("id") or ""))


def pods_of_create(pods, name, token) -> list:
    """The live pods a create of ``name`` with client ``token`` may have made: its token or its name.

    One is the create's pod (or a pod of that name it must not duplicate); more is an error to report.
    """
    return [
        pod
        for pod in select_pods(pods)
        if pod.get("name") == name or (token and (pod.get("env") or {}).get(CREATE_TOKEN_ENV) == token)
    ]


def volumes_named(volumes, name, data_center=None) -> list:
    """The network volumes named ``name`` (in ``data_center`` when given): the API keeps nothing else of a
    create, so a volume's name within its data center is its create token."""
    return [v for v in volumes if v.get("name") == name and (not data_center or v.get("dataCenter") == data_center)]


def pods_using_volume(pods, volume_id) -> list:
    """The live (not terminated) pods that mount network volume ``volume_id``."""
    return [
        pod
        for pod in select_pods(pods)
        if any(m.get("volumeId") == volume_id for m in ((pod.get("mounts") or {}).get("network") or []))
    ]


def parse_pod_name(name, prefix=DEFAULT_NAME_PREFIX):
    """Split ``<prefix>-<run_id>-<role>`` into ``(run_id, role)``; None for names of another shape.

    The role is the last dash-separated part, so a run id may itself contain dashes.
    """
    if not name or not prefix:
        return None
    lead = prefix + "-"
    if not name.startswith(lead):
        return None
    rest = name[len(lead) :]
    if "-" not in rest:
        return None
    run_id, role = rest.rsplit("-", 1)
    if not run_id or not role:
        return None
    return run_id, role


def ssh_key_identity(line):
    """``(type, base64)`` of an authorized_keys line, the part that identifies a key; None if invalid."""
    if not isinstance(line, str):
        return None
    text = line.strip()
    if not SSH_KEY_PATTERN.match(text):
        return None
    parts = text.split(None, 2)
    return parts[0], parts[1]
