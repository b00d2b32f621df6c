#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: runpod_billing_info
short_description: Read what RunPod pods and network volumes cost over a time range
version_added: 0.1.0
description:
  - Reads time-bucketed billing records for pods and network volumes from the RunPod REST API v2.
  - Give either O(last_n) buckets or a O(start_time)/O(end_time) window; without either RunPod reports
    the last 30 days.
  - Stopped pods still bill their storage; this is where it shows.
author:
  - trainops.gpu maintainers (!UNKNOWN)
extends_documentation_fragment:
  - trainops.gpu.runpod
  - trainops.gpu.runpod.attributes
  - trainops.gpu.runpod.attributes_info
  - ansible.builtin.action_common_attributes
options:
  resources:
    description:
      - Which billing families to read.
    type: list
    elements: str
    choices: [pods, network_volumes]
    default: [pods, network_volumes]
  start_time:
    description:
      - Start of the window, RFC 3339 (for example V(2026-06-01T00:00:00Z)). Snapped down to a bucket boundary.
    type: str
  end_time:
    description:
      - End of the window (exclusive), RFC 3339. Snapped up to a bucket boundary.
    type: str
  last_n:
    description:
      - The last N buckets, ending with the current one. Mutually exclusive with O(start_time) and O(end_time).
    type: int
  bucket_size:
    description:
      - Length of each bucket.
    type: str
    choices: [hour, day, week, month, year]
  pod_id:
    description:
      - Only this pod's records.
    type: str
  network_volume_id:
    description:
      - Only this network volume's records.
    type: str
seealso:
  - module: trainops.gpu.runpod_pod_info
"""

EXAMPLES = r"""
- name: What did the last 24 hours cost?
  trainops.gpu.runpod_billing_info:
    bucket_size: hour
    last_n: 24
  register: billing

- name: Report it
  ansible.builtin.debug:
    msg: "pods {{ billing.pods.metadata.totals.total_amount }} USD, total {{ billing.total_amount }} USD"
"""

RETURN = r"""
pods:
  description:
    - Pod billing, keys in snake_case. C(records) has one entry per pod per bucket (C(pod_id), C(start_time),
      C(end_time), C(total_amount), C(gpu_amount), C(cpu_amount), C(disk_amount)); C(metadata) echoes the
      resolved query and totals.
    - Empty when not requested.
  returned: always
  type: dict
  sample:
    records:
      - pod_id: pod_abc123
        start_time: "2026-06-01T00:00:00Z"
        end_time: "2026-06-02T00:00:00Z"
        total_amount: 12.34
    metadata:
      record_count: 1
      totals: {total_amount: 12.34}
network_volumes:
  description:
    - Network volume billing in the same shape, with C(network_volume_id), C(standard_amount) and
      C(high_performance_amount). Empty when not requested.
  returned: always
  type: dict
total_amount:
  description: Sum in USD of the requested families' totals.
  returned: always
  type: float
  sample: 17.5
"""

from ansible.module_utils.common.dict_transformations import camel_dict_to_snake_dict

from ansible_collections.trainops.gpu.plugins.module_utils._runpod_base import RunPodModule


def family_total(report) -> float:
    totals = (report.get("metadata") or {}).get("totals") or {}
    if "totalAmount" in totals:
        return float(totals["totalAmount"])
    return float(sum(r.get("totalAmount") or 0 for r in report.get("records") or []))


class RunPodBillingInfo(RunPodModule):
    def run(self):
        p = self.module.params
        if p["last_n"] is not None and p["last_n"] < 1:
            self.fail("last_n must be at least 1, got %s" % p["last_n"])
        window = dict(
            start_time=p["start_time"], end_time=p["end_time"], bucket_size=p["bucket_size"], last_n=p["last_n"]
        )
        total = 0.0
        self.result.update(pods={}, network_volumes={})
        if "pods" in p["resources"]:
            report = self.client.billing("pods", resource_id=p["pod_id"], **window)
            total += family_total(report)
            self.result["pods"] = camel_dict_to_snake_dict(report)
        if "network_volumes" in p["resources"]:
            report = self.client.billing("network-volumes", resource_id=p["network_volume_id"], **window)
            total += family_total(report)
            self.result["network_volumes"] = camel_dict_to_snake_dict(report)
        self.result["total_amount"] = round(total, 6)


def main():
    module = RunPodBillingInfo.build_module(
        argument_spec=dict(
            resources=dict(
                type="list", elements="str", choices=["pods", "network_volumes"], default=["pods", "network_volumes"]
            ),
            start_time=dict(type="str"),
            end_time=dict(type="str"),
            last_n=dict(type="int"),
            bucket_size=dict(type="str", choices=["hour", "day", "week", "month", "year"]),
            pod_id=dict(type="str"),
            network_volume_id=dict(type="str"),
        ),
        mutually_exclusive=[("last_n", "start_time"), ("last_n", "end_time")],
        supports_check_mode=True,
    )
    RunPodBillingInfo(module).execute()


if __name__ == "__main__":
    main()
