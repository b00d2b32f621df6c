# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cost audit's rows and totals (docs/audit.md), from what the API lists and what the runs recorded.

Pure: the runpod_audit_info module does the reading (GETs only, and the runs' state.json files) and hands the
results here. Pods and volumes come in the snake_case shape of runpod_pod_info and runpod_network_volume_info.
"""

from __future__ import annotations

import os
import re

from ansible_collections.trainops.gpu.plugins.module_utils._costs import network_volume_per_month, pod_cost_now

TEARDOWN_COMMAND = (
    "ansible-playbook playbooks/teardown.yml -e teardown_run_id={run_id}"
    " -e teardown_pod={pod} -e teardown_confirm={pod}"
)


def recorded_resources(states) -> list:
    """Every resource the runs recorded, each with its ``run_id``; ``states``: (state.json path, document) pairs."""
    out = []
    for path, document in states:
        run_id = (document or {}).get("run_id") or os.path.basename(os.path.dirname(path))
        for resource in (document or {}).get("resources") or []:
            out.append(dict(resource, run_id=run_id))
    return out


def billed_by_resource(pod_records, volume_records) -> dict:
    """Resource id -> USD billed in the window, summed over its buckets."""
    billed = {}
    for key, records in (("pod_id", pod_records), ("network_volume_id", volume_records)):
        for record in records or []:
            rid = record.get(key)
            billed[rid] = billed.get(rid, 0.0) + float(record.get("total_amount") or 0.0)
    return billed


def runs_of(recorded, resource_id) -> list:
    """The run ids that recorded ``resource_id``, first seen first."""
    runs = []
    for resource in recorded:
        if resource.get("id") == resource_id and resource["run_id"] not in runs:
            runs.append(resource["run_id"])
    return runs


def guessed_run_id(name, prefix):
    """The run id in a pod name ``<prefix><run_id>-<role>``, None when the name is not of that shape."""
    found = re.search("^" + re.escape(prefix) + "(.+)-[^-]+$", name or "")
    return found.group(1) if found else None


def pod_row(pod, recorded_pods, billed, prefix, price_rules) -> dict:
    runs = runs_of(recorded_pods, pod["id"])
    prefixed = (pod.get("name") or "").startswith(prefix)
    cost = pod_cost_now(pod, price_rules)
    run_id = runs[0] if runs else (guessed_run_id(pod.get("name"), prefix) or "RUN_ID")
    command = None
    if prefixed or runs:
        command = TEARDOWN_COMMAND.format(run_id=run_id, pod=pod["id"])
        if cost["stopped"]:
            command += " -e teardown_start_stopped=true"
    return {
        "id": pod["id"],
        "name": pod.get("name"),
        "status": pod.get("status"),
        "ours": prefixed or bool(runs),
        "by_prefix": prefixed,
        "runs": runs,
        "orphan": prefixed and not runs,
        "gpu_type": pod.get("gpu_type"),
        "gpu_count": pod.get("gpu_count"),
        "cloud": pod.get("cloud"),
        "data_center": pod.get("data_center_id"),
        "container_disk_gb": pod.get("container_disk"),
        "volume_gb": cost["volume_gb"],
        "network_volume_id": (pod.get("network_volume") or {}).get("id"),
        "cost_per_hour_api": cost["cost_per_hour_api"],
        "storage_per_month_stopped": cost["storage_per_month_stopped"],
        "cost_per_hour_now": cost["cost_per_hour_now"],
        "billed_in_window": round(billed.get(pod["id"], 0.0), 6),
        "teardown_command": command,
    }


def volume_row(volume, pods, recorded_volumes, billed, prefix, price_rules) -> dict:
    runs = runs_of(recorded_volumes, volume["id"])
    prefixed = (volume.get("name") or "").startswith(prefix)
    attached = [p["id"] for p in pods if p.get("network_volume") and p["network_volume"].get("id") == volume["id"]]
    month = network_volume_per_month(volume, price_rules)
    return {
        "id": volume["id"],
        "name": volume.get("name"),
        "size_gb": volume.get("size"),
        "data_center": volume.get("data_center"),
        "type": volume.get("type"),
        "ours": prefixed or bool(runs),
        "by_prefix": prefixed,
        "runs": runs,
        "orphan": prefixed and not runs,
        "attached_pods": attached,
        "unattached": not attached,
        "cost_per_month": round(month, 6),
        "cost_per_hour_now": round(month / price_rules["hours_per_month"], 6),
        "billed_in_window": round(billed.get(volume["id"], 0.0), 6),
    }


def gone_row(resource) -> dict:
    return {
        "run_id": resource["run_id"],
        "id": resource.get("id"),
        "name": resource.get("name"),
        "recorded_status": resource.get("status"),
        "terminate_recorded": (resource.get("final") or {}).get("status") == "TERMINATED",
    }


def _per_hour(rows, keep=lambda row: True) -> float:
    return sum(row["cost_per_hour_now"] for row in rows if keep(row))


def _ours(row) -> bool:
    return row["ours"]


def _not_ours(row) -> bool:
    return not row["ours"]


def totals(pod_rows, volume_rows, price_rules) -> dict:
    per_hour = _per_hour(pod_rows) + _per_hour(volume_rows)
    return {
        "pods": len(pod_rows),
        "network_volumes": len(volume_rows),
        "per_hour_now": round(per_hour, 6),
        "per_month_at_current_rates": round(per_hour * price_rules["hours_per_month"], 2),
        "ours_per_hour_now": round(_per_hour(pod_rows, _ours) + _per_hour(volume_rows, _ours), 6),
        "not_ours_per_hour_now": round(_per_hour(pod_rows, _not_ours) + _per_hour(volume_rows, _not_ours), 6),
        "running_pods_per_hour": round(sum(row["cost_per_hour_api"] for row in pod_rows), 6),
        "stopped_storage_per_month": round(
            sum(row["storage_per_month_stopped"] for row in pod_rows if row["storage_per_month_stopped"] is not None), 6
        ),
        "network_volumes_per_month": round(sum(row["cost_per_month"] for row in volume_rows), 6),
    }


def audit_document(pods, volumes, states, billing, prefix, price_rules, requested) -> dict:
    """The audit's rows and totals.

    ``states``: (path, state.json document) pairs, sorted by path; ``billing``: runpod_billing_info's answer
    (``pods``, ``network_volumes``, ``total_amount``); ``requested``: the billing query as asked.
    """
    recorded = recorded_resources(states)
    recorded_pods = [r for r in recorded if r.get("kind") == "pod"]
    recorded_volumes = [r for r in recorded if r.get("kind") == "network_volume"]
    pod_records = (billing.get("pods") or {}).get("records") or []
    volume_records = (billing.get("network_volumes") or {}).get("records") or []
    billed = billed_by_resource(pod_records, volume_records)
    pod_rows = [pod_row(p, recorded_pods, billed, prefix, price_rules) for p in pods]
    volume_rows = [volume_row(v, pods, recorded_volumes, billed, prefix, price_rules) for v in volumes]
    live = set(p["id"] for p in pods)
    return {
        "prefix": prefix,
        "runs_read": [path for path, _document in states],
        "prices": price_rules,
        "pods": pod_rows,
        "network_volumes": volume_rows,
        "orphans": [row["id"] for row in pod_rows if row["orphan"]],
        "recorded_but_gone": [gone_row(r) for r in recorded_pods if r.get("id") not in live],
        "unattached_volumes": [row["id"] for row in volume_rows if row["unattached"]],
        "orphaned_volumes": [row["id"] for row in volume_rows if row["orphan"]],
        "totals": totals(pod_rows, volume_rows, price_rules),
        "billing": {
            "window": (billing.get("pods") or {}).get("metadata") or {},
            "requested": requested,
            "pods_amount": round(sum(float(r.get("total_amount") or 0.0) for r in pod_records), 6),
            "network_volumes_amount": round(sum(float(r.get("total_amount") or 0.0) for r in volume_records), 6),
            "total_amount": billing.get("total_amount"),
            "by_resource": billed,
        },
    }


def billing_total(report) -> float:
    """USD of one billing report as the API returns it (camelCase): its totals, else the sum of its records."""
    totals = (report.get("metadata") or {}).get("totals") or {}
    if "totalAmount" in totals:
        return float(totals["totalAmount"])
    return float(sum(r.get("totalAmount") or 0 for r in report.get("records") or []))
