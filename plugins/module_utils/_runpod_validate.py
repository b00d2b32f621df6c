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
# ``\Z``, not ``$``: Python's ``$`` also matches before a final newline, which the API's patterns do not.
CUDA_VERSION = re.compile(r"^\d+\.\d+\Z")
# The API's ``port/protocol`` (emulator schema: ``^\d{1,5}/(tcp|udp|http)$``).
PORT = re.compile(r"^(\d{1,5})/(tcp|udp|http)\Z")
# Environment names a container runtime accepts; values must not hold NUL (nor lone surrogates).
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
ENV_VALUE_BAD = re.compile("[\x00\ud800-\udfff]")
# Mount paths are absolute container paths; ``:`` and ``,`` would split a bind-mount spec.
MOUNT_PATH_BAD = re.compile("[\x00:,]")
# Set by the pod module on every create (see runpod_pod); a playbook may not set it.
RESERVED_ENV = ("TRAINOPS_CREATE_TOKEN",)


def _known(ids, limit=12) -> str:
    ids = sorted(ids)
    shown = ", ".join(ids[:limit])
    return shown + (", ..." if len(ids) > limit else "")


def integer_problems(values) -> list:
    """Problems with ``{option: value}`` meant as integers: a boolean is not one, whatever Python says."""
    return [
        "%s must be an integer, got %s" % (option, str(value).lower())
        for option, value in sorted(values.items())
        if isinstance(value, bool)
    ]


def port_problems(ports) -> list:
    """Problems with ``ports`` entries, each ``<1..65535>/<tcp|udp|http>``."""
    problems = []
    for port in ports or []:
        match = PORT.match(port) if isinstance(port, str) else None
        if match is None:
            problems.append("port %r is not port/protocol with protocol tcp, udp or http (for example 22/tcp)" % port)
        elif not 1 <= int(match.group(1)) <= 65535:
            problems.append("port %r is out of range: 1..65535" % port)
    return problems


def env_problems(env, reserved=RESERVED_ENV) -> list:
    """Problems with container environment variables (names, values), ``reserved`` names included."""
    problems = []
    for key in sorted(env or {}, key=str):
        value = env[key]
        if not isinstance(key, str) or not ENV_NAME.match(key):
            problems.append("env name %r is not a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*)" % key)
        elif key in reserved:
            problems.append("env name %s is reserved: the module sets it on every create" % key)
        if not isinstance(value, str) or ENV_VALUE_BAD.search(value):
            problems.append("the value of env %r holds a NUL byte or an invalid character" % key)
    return problems


def mount_path_problems(option, path) -> list:
    """Problems with a mount path given as ``option``: absolute, without ``:``, ``,`` or NUL."""
    if not isinstance(path, str) or not path.startswith("/"):
        return ["%s %r is not an absolute path" % (option, path)]
    if MOUNT_PATH_BAD.search(path):
        return ["%s %r must not contain ':', ',' or NUL" % (option, path)]
    return []


def volume_choice_problems(persistent_volume_size, network_volume_id) -> list:
    """A pod mounts a persistent volume or a network volume, never both (RunPod's ``Mounts``: at most one of
    ``persistent`` and ``network``); a create asking for both is refused, not sent with one of them dropped."""
    if persistent_volume_size is None or network_volume_id is None:
        return []
    return [
        "persistent_volume_size (%s GB) and network_volume_id (%s) are both set, but a pod mounts a persistent "
        "volume or a network volume, not both: drop one of them" % (persistent_volume_size, network_volume_id)
    ]


def container_problems(body) -> list:
    """Problems with the container settings of a create or update body (ports, env, mount paths, disk)."""
    problems = port_problems(body.get("ports")) + env_problems(body.get("env"))
    mounts = body.get("mounts") or {}
    if mounts.get("persistent"):
        problems += mount_path_problems("persistent_volume_path", mounts["persistent"].get("path"))
    for network in mounts.get("network") or []:
        problems += mount_path_problems("network_volume_path", network.get("path"))
    disk = body.get("disk")
    if disk is not None and not isinstance(disk, bool) and disk < 1:
        problems.append("container_disk must be at least 1 GB, got %s" % disk)
    if "name" in body and not body.get("name"):
        problems.append("name must not be empty")
    return problems


def validate_pod_body(
    body, gpu_types, data_centers, network_volume=None, network_volume_missing=False, cpu_types=None
) -> list:
    """Problems with a createPod body, checked against ``gpu_types`` and ``data_centers`` from the catalog.

    ``network_volume`` is the volume the body mounts (already fetched), ``network_volume_missing`` True when
    the body names a volume that does not exist. ``cpu_types`` (the CPU catalog), when given, is checked
    for the flavor and its vCPU range. ``gpu_types`` read with availability also check the data centers
    and CUDA versions that offer the GPU.
    """
    problems = []
    gpu = body.get("gpu")
    cpu = body.get("cpu")
    if bool(gpu) == bool(cpu):
        problems.append("exactly one of gpu_type or cpu_flavor must be set")
    wanted_dcs = list(body.get("dataCenterIds") or [])
    if gpu:
        problems += _gpu_problems(gpu, gpu_types, body.get("cloud") or "SECURE", wanted_dcs)
    if cpu:
        problems += _cpu_problems(cpu, cpu_types, body.get("cloud") or "SECURE")
    known_dcs = set(dc.get("id") for dc in data_centers)
    for dc_id in wanted_dcs:
        if dc_id not in known_dcs:
            problems.append("unknown data center %r; the catalog lists: %s" % (dc_id, _known(known_dcs)))
    problems += container_problems(body)
    problems += _mount_problems(body.get("mounts") or {}, bool(cpu), wanted_dcs, network_volume, network_volume_missing)
    return problems


def _cpu_problems(cpu, cpu_types, cloud) -> list:
    """Problems with the ``cpu`` part of a createPod body; the flavor is checked when ``cpu_types`` is given."""
    vcpus = cpu.get("vcpuCount") or 0
    if isinstance(vcpus, bool):
        return []  # named by integer_problems
    problems = []
    if cloud != "SECURE":
        problems.append("CPU pods run on the SECURE cloud only, not %s" % cloud)
    flavor = None
    if cpu_types is not None:
        by_id = dict((c.get("id"), c) for c in cpu_types)
        flavor = by_id.get(cpu.get("id"))
        if flavor is None:
            return [*problems, "unknown cpu_flavor %r; the catalog offers: %s" % (cpu.get("id"), _known(by_id))]
    low = ((flavor or {}).get("vcpu") or {}).get("min", 2)
    high = ((flavor or {}).get("vcpu") or {}).get("max")
    if vcpus < low or vcpus & (vcpus - 1) or (high is not None and vcpus > high):
        problems.append(
            "vcpu_count must be a power of two from %s to %s%s, got %s"
            % (low, high if high is not None else "the flavor's maximum", " for %s" % cpu.get("id"), vcpus)
        )
    return problems


def _gpu_problems(gpu, gpu_types, cloud, wanted_dcs=()) -> list:
    """Problems with the ``gpu`` part of a createPod body on ``cloud``, placed in one of ``wanted_dcs``."""
    problems = []
    by_id = dict((g.get("id"), g) for g in gpu_types)
    gpu_type = by_id.get(gpu.get("id"))
    count = gpu.get("count", 1)
    if isinstance(count, bool):
        count = 1  # named by integer_problems
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
        problems += _placement_problems(gpu, gpu_type, wanted_dcs)
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


def _placement_problems(gpu, gpu_type, wanted_dcs) -> list:
    """Where the catalog (read with availability) says the GPU type is offered, and with which host CUDA."""
    problems = []
    if "dataCenters" in gpu_type:
        offered = [dc.get("id") for dc in gpu_type.get("dataCenters") or [] if dc.get("availability") != "NONE"]
        if not offered:
            problems.append("GPU type %r is not available in any data center now" % gpu.get("id"))
        elif wanted_dcs and not set(wanted_dcs) & set(offered):
            problems.append(
                "GPU type %r is not offered in data center %s; it is offered in: %s"
                % (gpu.get("id"), ", ".join(wanted_dcs), ", ".join(sorted(offered)))
            )
    if "cudaVersions" in gpu_type:
        hosts = [v.get("version") for v in gpu_type.get("cudaVersions") or [] if v.get("available", True)]
        floor = gpu.get("minCudaVersion")
        if floor and CUDA_VERSION.match(floor) and not [v for v in hosts if _cuda(v) >= _cuda(floor)]:
            problems.append(
                "no host offers CUDA %s or newer for %r (hosts have: %s)"
                % (floor, gpu.get("id"), ", ".join(hosts) or "none")
            )
        allowed = gpu.get("allowedCudaVersions") or []
        if allowed and not set(allowed) & set(hosts):
            problems.append(
                "no host offers CUDA %s for %r (hosts have: %s)"
                % (" or ".join(allowed), gpu.get("id"), ", ".join(hosts) or "none")
            )
    return problems


def _cuda(version) -> tuple:
    """``major.minor`` as numbers (12.11 is above 12.2); () for anything else."""
    try:
        return tuple(int(part) for part in str(version).split("."))
    except ValueError:
        return ()


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


def placement_option_problems(params, data_centers=None) -> list:
    """Problems with runpod_catalog_info's placement options (``data_center_ids``, ``min_cuda_version``,
    ``network_volume_type``). Without ``data_centers`` (the data center catalog) only what needs no API call;
    with it, the data center ids are checked too."""
    given = [k for k in ("data_center_ids", "min_cuda_version", "network_volume_type") if params.get(k)]
    problems = []
    if given and not (params.get("gpu_type") and params.get("availability")):
        problems.append(
            "%s rank the data centers for one GPU type by its stock: give gpu_type and availability=true too"
            % " and ".join(given)
        )
    version = params.get("min_cuda_version")
    if version and not (isinstance(version, str) and CUDA_VERSION.match(version)):
        problems.append("min_cuda_version %r is not major.minor" % (version,))
    if data_centers is None:
        return problems
    known = set(dc.get("id") for dc in data_centers)
    unknown = [dc_id for dc_id in params.get("data_center_ids") or [] if dc_id not in known]
    if unknown:
        problems.append(
            "unknown data center %s; the catalog lists: %s" % (", ".join(map(repr, unknown)), _known(known))
        )
    return problems


def validate_volume_request(size, data_center, volume_type, data_centers) -> list:
    """Problems with a network volume create (size, data center, storage tier)."""
    problems = []
    if size is None:
        problems.append("size is required to create a network volume")
    elif isinstance(size, bool):
        problems.append("size must be an integer, got %s" % str(size).lower())
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
