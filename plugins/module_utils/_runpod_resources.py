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

# One definition of a secret-looking variable name, shared with provenance's env redaction.
from ansible_collections.trainops.gpu.plugins.module_utils._secrets import MIN_SCRUB_LENGTH, is_secret_name

DEFAULT_NAME_PREFIX = "trainops"

# The env entry every pod create carries: a client token, unique per create, that RunPod stores and returns
# with the pod, so a create whose answer was lost is found again by it (never guessed from the name alone).
CREATE_TOKEN_ENV = "TRAINOPS_CREATE_TOKEN"

# authorized_keys-style line, as UpdateSshKeysRequest accepts it: <type> <base64-key> [comment].
SSH_KEY_PATTERN = re.compile(r"^(ssh|ecdsa|sk)-[^\s]+ [^\s]+([ \t][^\n\r]*)?$")


def secret_env_values(env, secret_names=()) -> set:
    """The values of ``env`` that are secrets, as text: those of secret-looking names (``is_secret_name``) and of
    every name in ``secret_names`` (what a task gave as ``secret_env``), whatever the name looks like.

    A module adds them to its ``no_log_values`` (RunPodAnsibleModule does for its ``env`` and ``secret_env``), so
    that no result, message, diff or ``-v`` output shows them. As in provenance, values shorter than
    MIN_SCRUB_LENGTH and booleans are left out: masking ``1`` (``USE_AUTH=1``) would mask every 1 of the output."""
    secret_names = frozenset(secret_names or ())
    return set(
        str(value)
        for name, value in (env or {}).items()
        if not isinstance(value, bool)
        and value is not None
        and len(str(value)) >= MIN_SCRUB_LENGTH
        and (name in secret_names or is_secret_name(name))
    )


def pod_summary(pod) -> dict:
    """The snake_case view of a pod that modules return, and the inventory's host variables: the one path from an
    API pod to anything Ansible shows or keeps.

    Environment variable values are left out on purpose, only their names are kept: RunPod returns the env as
    it was given, secrets (``secret_env``, the create token) included, and a pod read later does not say which
    of its variables were secret.
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


# Catalog stock levels with stock, best first (AvailabilityLevel; NONE means none now).
STOCK_LEVELS = ("HIGH", "MEDIUM", "LOW")


def placement(gpu_type, data_centers, preferred=(), network_volume_type=None) -> list:
    """The data centers where ``gpu_type`` (its catalog entry, read with availability) has stock now, best first.

    Higher stock first; equal stock in the order of ``preferred`` (the caller's fallback order), then by id. With
    ``preferred`` only those data centers are candidates, with ``network_volume_type`` only those that offer
    network volumes of that type (``data_centers``: the data center catalog). Stock is a hint, not a
    reservation: a create in the first may still fail for capacity, and the next one is the fallback.
    Each entry: ``id``, ``name``, ``availability``, ``network_volume_types``.
    """
    by_id = dict((dc.get("id"), dc) for dc in data_centers or [])
    rank = dict((dc_id, index) for index, dc_id in enumerate(preferred or ()))
    found = []
    for entry in (gpu_type or {}).get("dataCenters") or []:
        dc_id, level = entry.get("id"), entry.get("availability")
        if level not in STOCK_LEVELS or (rank and dc_id not in rank):
            continue
        types = list((by_id.get(dc_id) or {}).get("networkVolumeTypes") or [])
        if network_volume_type and network_volume_type not in types:
            continue
        found.append({"id": dc_id, "name": entry.get("name"), "availability": level, "network_volume_types": types})
    return sorted(
        found, key=lambda dc: (STOCK_LEVELS.index(dc["availability"]), rank.get(dc["id"], len(rank)), dc["id"])
    )


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
