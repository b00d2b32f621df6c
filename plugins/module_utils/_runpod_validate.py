# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Validation of create requests against the catalog, before anything is created.

Pure functions: they take the request body and catalog lists already fetched and return a list of
problems, each a sentence naming what is wrong. An empty list means the request may be sent.
"""

from __future__ import annotations

import re

VOLUME_MIN_GB = 10
VOLUME_MAX_GB = 4096
PERSISTENT_MIN_GB = 10
CUDA_VERSION = re.compile(r"^\d+\.\d+$")


def _known(ids, limit=12) -> str:
    ids = sorted(ids)
    shown = ", ".join(ids[:limit])
    return shown + (", ..." if len(ids) > limit else "")


def validate_pod_body(body, gpu_types, data_centers, network_volume=None, network_volume_missing=False) -> list:
    """Problems with a createPod body, checked against ``gpu_types`` and ``data_centers`` from the catalog.

    ``network_volume`` is the volume the body mounts (already fetched), ``network_volume_missing`` True when
    the body names a volume that does not exist.
    """
    problems = []
    gpu = body.get("gpu")
    cpu = body.get("cpu")
    if bool(gpu) == bool(cpu):
        problems.append("exactly one of gpu_type or cpu_flavor must be set")
    if gpu:
        problems += _gpu_problems(gpu, gpu_types, body.get("cloud") or "SECURE")
    if cpu:
        vcpus = cpu.get("vcpuCount") or 0
        if vcpus < 2 or vcpus & (vcpus - 1):
            problems.append("vcpu_count must be a power of two of at least 2, got %s" % vcpus)
    known_dcs = set(dc.get("id") for dc in data_centers)
    wanted_dcs = list(body.get("dataCenterIds") or [])
    for dc_id in wanted_dcs:
        if dc_id not in known_dcs:
            problems.append("unknown data center %r; the catalog lists: %s" % (dc_id, _known(known_dcs)))
    disk = body.get("disk")
    if disk is not None and disk < 1:
        problems.append("container_disk must be at least 1 GB, got %s" % disk)
    problems += _mount_problems(body.get("mounts") or {}, bool(cpu), wanted_dcs, network_volume, network_volume_missing)
    return problems


def _gpu_problems(gpu, gpu_types, cloud) -> list:
    """Problems with the ``gpu`` part of a createPod body on ``cloud``."""
    problems = []
    by_id = dict((g.get("id"), g) for g in gpu_types)
    gpu_type = by_id.get(gpu.get("id"))
    count = gpu.get("count", 1)
    if gpu_type is None:
        problems.append("unknown GPU type %r; the catalog offers: %s" % (gpu.get("id"), _known(by_id)))
    else:
        offered = gpu_type.get(cloud.lower())
        ceiling = (gpu_type.get("maxCount") or {}).get(cloud.lower())
        if offered is False or ceiling == 0:
            problems.append("GPU type %r is not offered on the %s cloud" % (gpu.get("id"), cloud))
        elif ceiling is not None and count > ceiling:
            problems.append(
                "gpu_count %s is out of range for %r on the %s cloud: 1..%s" % (count, gpu.get("id"), cloud, ceiling)
            )
    if count < 1:
        problems.append("gpu_count must be at least 1, got %s" % count)
    for version in gpu.get("allowedCudaVersions") or []:
        if not CUDA_VERSION.match(version):
            problems.append("CUDA version %r is not major.minor" % version)
    if gpu.get("minCudaVersion") and not CUDA_VERSION.match(gpu["minCudaVersion"]):
        problems.append("min_cuda_version %r is not major.minor" % gpu["minCudaVersion"])
    if gpu.get("allowedCudaVersions") and gpu.get("minCudaVersion"):
        problems.append("allowed_cuda_versions and min_cuda_version are mutually exclusive")
    return problems


def _mount_problems(mounts, cpu_pod, wanted_dcs, network_volume, network_volume_missing) -> list:
    """Problems with the ``mounts`` of a createPod body (``cpu_pod`` True for a CPU pod)."""
    problems = []
    persistent = mounts.get("persistent")
    network = mounts.get("network") or []
    if persistent and network:
        problems.append("a pod takes either a persistent volume or a network volume, not both")
    if persistent:
        if persistent.get("size", 0) < PERSISTENT_MIN_GB:
            problems.append(
                "persistent_volume_size must be at least %s GB, got %s" % (PERSISTENT_MIN_GB, persistent.get("size"))
            )
        if cpu_pod:
            problems.append("CPU pods cannot have a persistent volume; use a network volume")
    if network:
        volume_id = network[0].get("volumeId")
        if network_volume_missing or network_volume is None:
            problems.append("network volume %r does not exist" % volume_id)
        else:
            volume_dc = network_volume.get("dataCenter")
            if wanted_dcs and volume_dc not in wanted_dcs:
                problems.append(
                    "network volume %r lives in data center %s, outside the pod's allowed data centers %s; "
                    "a volume attaches only to pods in its own data center"
                    % (volume_id, volume_dc, ", ".join(wanted_dcs))
                )
    return problems


def validate_volume_request(size, data_center, volume_type, data_centers) -> list:
    """Problems with a network volume create (size, data center, storage tier)."""
    problems = []
    if size is None:
        problems.append("size is required to create a network volume")
    elif not VOLUME_MIN_GB <= size <= VOLUME_MAX_GB:
        problems.append("size %s GB is out of range: %s..%s" % (size, VOLUME_MIN_GB, VOLUME_MAX_GB))
    if not data_center:
        problems.append("data_center is required to create a network volume")
        return problems
    by_id = dict((dc.get("id"), dc) for dc in data_centers)
    dc = by_id.get(data_center)
    if dc is None:
        problems.append("unknown data center %r; the catalog lists: %s" % (data_center, _known(by_id)))
        return problems
    tiers = list(dc.get("networkVolumeTypes") or [])
    if not tiers:
        problems.append("data center %s offers no network volumes" % data_center)
    elif volume_type and volume_type not in tiers:
        problems.append(
            "data center %s offers network volume types %s, not %s" % (data_center, ", ".join(tiers), volume_type)
        )
    return problems
