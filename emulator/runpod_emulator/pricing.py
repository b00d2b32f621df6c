"""Hourly rates of pods and network volumes: what the ledger accrues and what `cost` reports."""

from __future__ import annotations

from . import catalog
from .models import ACTIVE, NetworkVolume, Pod

HOURS_PER_MONTH = 730.0
# USD per GB-month, as RunPod publishes them: disk of a running pod, volume disk of a stopped pod
# (twice the running rate), network volumes by tier.
CONTAINER_DISK_GB_MONTH = 0.10
VOLUME_DISK_RUNNING_GB_MONTH = 0.10
VOLUME_DISK_STOPPED_GB_MONTH = 0.20
NETWORK_VOLUME_GB_MONTH = {"STANDARD": 0.07, "HIGH_PERFORMANCE": 0.14}


def compute_rates(pod: Pod) -> tuple[float, float]:
    """(gpu, cpu) USD per hour while the pod holds compute."""
    if pod.gpu:
        gpu = catalog.gpu_type(pod.gpu.id)
        if gpu is None:
            return 0.0, 0.0
        price = gpu.secure_price if pod.cloud == "SECURE" else gpu.community_price
        return price * pod.gpu_count, 0.0
    if pod.cpu is None:
        return 0.0, 0.0
    flavor = catalog.cpu_flavor(pod.cpu.id)
    return 0.0, (flavor.price_per_vcpu * pod.cpu.vcpu_count) if flavor else 0.0


def persistent_gb(pod: Pod) -> int:
    persistent = pod.mounts.get("persistent")
    return int(persistent["size"]) if persistent else 0


def disk_rate(pod: Pod, active: bool) -> float:
    """USD per hour of the pod's own storage; the container disk only exists while it runs."""
    if active:
        gb_month = pod.disk * CONTAINER_DISK_GB_MONTH + persistent_gb(pod) * VOLUME_DISK_RUNNING_GB_MONTH
    else:
        gb_month = persistent_gb(pod) * VOLUME_DISK_STOPPED_GB_MONTH
    return gb_month / HOURS_PER_MONTH


def pod_rates(pod: Pod, status: str) -> dict[str, float]:
    """Rates of a ledger segment for a pod in `status` (TERMINATED accrues nothing)."""
    if status == "TERMINATED":
        return {"gpu": 0.0, "cpu": 0.0, "disk": 0.0}
    active = status in ACTIVE
    gpu, cpu = compute_rates(pod) if active else (0.0, 0.0)
    return {"gpu": gpu, "cpu": cpu, "disk": disk_rate(pod, active)}


def pod_cost(pod: Pod) -> float:
    """The API's `cost` field: USD per hour now, 0.0 when EXITED, ERROR or TERMINATED."""
    if pod.status not in ACTIVE:
        return 0.0
    rates = pod_rates(pod, pod.status)
    return round(rates["gpu"] + rates["cpu"] + rates["disk"], 6)


def volume_rate(volume: NetworkVolume) -> float:
    return volume.size * NETWORK_VOLUME_GB_MONTH[volume.type] / HOURS_PER_MONTH


def volume_rates(volume: NetworkVolume) -> dict[str, float]:
    """Rates of a ledger segment for a network volume: its tier's rate, 0.0 for the other."""
    rate = volume_rate(volume)
    if volume.type == "STANDARD":
        return {"standard": rate, "highPerformance": 0.0}
    return {"standard": 0.0, "highPerformance": rate}
