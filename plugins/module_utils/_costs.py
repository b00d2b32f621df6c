# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What RunPod storage costs: the one price definition, used by the teardown role and the audit.

The emulator bills by its own copy (emulator/), which the e2e tests hold to these figures. USD per GB-month,
as RunPod publishes them. A stopped pod bills its volume disk at the stopped rate and no container disk (it is
wiped); a network volume bills by size and type whatever its pods do.
"""

from __future__ import annotations

import copy

PRICES = {
    "container_disk": 0.10,
    "volume_running": 0.10,
    "volume_stopped": 0.20,
    "network_volume": {"STANDARD": 0.07, "HIGH_PERFORMANCE": 0.14},
    "hours_per_month": 730,
}

# Pod statuses that bill compute; any other status (EXITED, ERROR) bills storage only.
ACTIVE_STATUSES = ("PROVISIONING", "STARTING", "RUNNING")


def prices(overrides=None) -> dict:
    """The published prices with ``overrides`` (a partial price dict, as the role option takes it) on top."""
    merged = copy.deepcopy(PRICES)
    for key, value in (overrides or {}).items():
        if key == "network_volume" and isinstance(value, dict):
            merged["network_volume"].update(value)
        else:
            merged[key] = value
    return merged


def volume_disk_gb(pod) -> int:
    """The size of a pod's persistent volume disk (0 without one); ``pod`` as runpod_pod_info returns it."""
    persistent = (pod or {}).get("persistent_volume") or {}
    return persistent.get("size") or 0


def pod_storage(pod, price_rules) -> dict:
    """The storage bill of one pod, running and stopped (the teardown's cost statement and evidence)."""
    p = price_rules
    volume_gb = volume_disk_gb(pod)
    disk_gb = (pod or {}).get("container_disk") or 0
    return {
        "volume_gb": int(volume_gb),
        "container_disk_gb": int(disk_gb),
        "stopped_per_month": round(float(volume_gb * p["volume_stopped"]), 6),
        "stopped_per_hour": round(float(volume_gb * p["volume_stopped"] / p["hours_per_month"]), 6),
        "running_storage_per_month": round(float(disk_gb * p["container_disk"] + volume_gb * p["volume_running"]), 6),
        "prices": p,
    }


def pod_cost_now(pod, price_rules) -> dict:
    """What a pod bills now: the API's compute rate, and for a stopped pod its volume disk spread per hour."""
    volume_gb = volume_disk_gb(pod)
    stopped = pod.get("status") not in ACTIVE_STATUSES
    storage_month = volume_gb * price_rules["volume_stopped"] if stopped else 0.0
    api = float(pod.get("cost_per_hr") or 0.0)
    return {
        "volume_gb": volume_gb,
        "stopped": stopped,
        "cost_per_hour_api": api,
        "storage_per_month_stopped": round(storage_month, 6) if stopped else None,
        "cost_per_hour_now": round(api + storage_month / price_rules["hours_per_month"], 6),
    }


def network_volume_per_month(volume, price_rules) -> float:
    """What a network volume bills per month (an unknown type bills as STANDARD)."""
    rates = price_rules["network_volume"]
    rate = rates.get(volume.get("type") or "STANDARD", rates["STANDARD"])
    return float(volume.get("size")) * rate


def billing_now(pod, pod_id, price_rules, read=True) -> dict:
    """What a run leaves billing on one pod, as a record and one sentence for a verdict or report.

    ``pod`` as runpod_pod_info returns it (None or {} when the API lists no such pod: it bills nothing);
    ``read`` false: the API could not be read, so what it bills is unknown.
    """
    if not read:
        return {"pod": pod_id, "status": "UNKNOWN", "cost_per_hour": None, "bills": "unknown",
                "sentence": f"pod {pod_id} could not be read from the API: what it bills is unknown "
                            "(playbooks/audit.yml lists what bills)."}  # fmt: skip
    if not pod or pod.get("status") == "TERMINATED":
        return {"pod": pod_id, "status": "TERMINATED", "cost_per_hour": 0.0, "bills": "nothing",
                "sentence": f"pod {pod_id} is TERMINATED: nothing is left billing."}  # fmt: skip
    cost = pod_cost_now(pod, price_rules)
    status = pod.get("status") or "UNKNOWN"
    if not cost["stopped"]:
        bills = "compute"
        what = f"compute and disks at {cost['cost_per_hour_api']:g} USD/h (the API's rate)"
    elif cost["volume_gb"]:
        bills = "storage"
        what = f"its {cost['volume_gb']} GB volume disk, {cost['cost_per_hour_now']:g} USD/h"
    else:
        bills = "nothing"
        what = "nothing (no volume disk)"
    return {
        "pod": pod_id,
        "status": status,
        "cost_per_hour": cost["cost_per_hour_now"],
        "bills": bills,
        "sentence": f"pod {pod_id} is {status}: it bills {what}.",
    }


def volume_billing_now(volume, price_rules) -> dict:
    """What a network volume the API still lists bills, as a record and one sentence (``volume`` as
    runpod_network_volume_info returns it)."""
    per_hour = round(network_volume_per_month(volume, price_rules) / price_rules["hours_per_month"], 6)
    return {
        "network_volume": volume.get("id"),
        "cost_per_hour": per_hour,
        "sentence": f"network volume {volume.get('id')} ({volume.get('size')} GB) bills {per_hour:g} USD/h.",
    }
