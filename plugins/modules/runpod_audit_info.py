#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: runpod_audit_info
short_description: What bills on a RunPod account, ours and not ours, with rows and totals
version_added: 0.2.0
description:
  - Lists the pods and network volumes on the account, reads the billing history of a window and the runs'
    C(state.json) files under O(runs_dir), and returns the cost audit's rows and totals (docs/audit.md).
  - A resource is ours when its name starts with O(prefix) or a run recorded it. An orphan is a pod or volume
    with our prefix that no run recorded; each pod of ours gets the teardown command that removes it through
    the teardown gate.
  - Storage is priced by the collection's one price definition (C(plugins/module_utils/_costs.py)), compute by
    the cost per hour the API reports.
  - Read only. The only requests are GETs; nothing is written (playbooks/audit.yml writes the report).
author:
  - trainops.gpu maintainers (!UNKNOWN)
extends_documentation_fragment:
  - trainops.gpu.runpod
  - trainops.gpu.runpod.attributes
  - trainops.gpu.runpod.attributes_info
  - ansible.builtin.action_common_attributes
options:
  prefix:
    description:
      - The name prefix of the collection's pods and volumes (C(<prefix><run_id>-<role>)).
    type: str
    default: trainops-
  runs_dir:
    description:
      - The controller's runs directory. Every C(state.json) in it or one level below is read; a missing
        directory means no run recorded anything.
    type: path
    required: true
  bucket_size:
    description:
      - Length of each billing bucket.
    type: str
    choices: [hour, day, week, month, year]
    default: day
  last_n:
    description:
      - The last N billing buckets, ending with the current one. Ignored when O(start_time) and O(end_time)
        are given.
    type: int
    default: 30
  start_time:
    description:
      - Start of the billing window, RFC 3339. Give O(end_time) with it.
    type: str
  end_time:
    description:
      - End of the billing window (exclusive), RFC 3339. Give O(start_time) with it.
    type: str
  prices:
    description:
      - Storage prices in USD per GB-month that differ from the published ones (keys C(container_disk),
        C(volume_running), C(volume_stopped), C(network_volume) by type, and C(hours_per_month)). Keys not
        given keep the published price.
    type: dict
    default: {}
seealso:
  - module: trainops.gpu.runpod_pod_info
  - module: trainops.gpu.runpod_network_volume_info
  - module: trainops.gpu.runpod_billing_info
"""

EXAMPLES = r"""
- name: What bills on the account
  trainops.gpu.runpod_audit_info:
    runs_dir: "{{ playbook_dir }}/../runs"
    bucket_size: hour
    last_n: 48
  register: audit_info

- name: Say it
  ansible.builtin.debug:
    msg: >-
      {{ audit_info.audit.totals.per_hour_now }} USD per hour now; orphans:
      {{ audit_info.audit.orphans | join(', ') or 'none' }}
"""

RETURN = r"""
audit:
  description:
    - The audit document playbooks/audit.yml writes to C(audit.json) (with C(generated_at) and C(api_url)
      added). docs/audit.md describes every field.
  returned: always
  type: dict
  contains:
    prefix:
      description: The name prefix of ours.
      type: str
      sample: trainops-
    runs_dir:
      description: O(runs_dir), resolved.
      type: str
    runs_read:
      description: The C(state.json) files read, sorted.
      type: list
      elements: str
    prices:
      description: The storage prices used (USD per GB-month) and C(hours_per_month).
      type: dict
      sample:
        container_disk: 0.1
        volume_running: 0.1
        volume_stopped: 0.2
        network_volume: {STANDARD: 0.07, HIGH_PERFORMANCE: 0.14}
        hours_per_month: 730
    pods:
      description:
        - One row per pod on the account, sorted by name then id (C(id), C(name), C(status), C(ours),
          C(by_prefix), C(runs), C(orphan), C(gpu_type), C(gpu_count), C(cloud), C(data_center),
          C(container_disk_gb), C(volume_gb), C(network_volume_id), C(cost_per_hour_api),
          C(storage_per_month_stopped), C(cost_per_hour_now), C(billed_in_window), C(teardown_command)).
      type: list
      elements: dict
    network_volumes:
      description:
        - One row per network volume (C(id), C(name), C(size_gb), C(data_center), C(type), C(ours),
          C(by_prefix), C(runs), C(orphan), C(attached_pods), C(unattached), C(cost_per_month),
          C(cost_per_hour_now), C(billed_in_window)).
      type: list
      elements: dict
    orphans:
      description: Ids of our pods that no run recorded.
      type: list
      elements: str
    recorded_but_gone:
      description: Pods a run recorded that the account no longer lists (C(run_id), C(id), C(name),
        C(recorded_status), C(terminate_recorded)).
      type: list
      elements: dict
    unattached_volumes:
      description: Ids of the network volumes no pod mounts.
      type: list
      elements: str
    orphaned_volumes:
      description: Ids of our network volumes that no run recorded.
      type: list
      elements: str
    totals:
      description:
        - C(pods), C(network_volumes), C(per_hour_now), C(per_month_at_current_rates), C(ours_per_hour_now),
          C(not_ours_per_hour_now), C(running_pods_per_hour), C(stopped_storage_per_month),
          C(network_volumes_per_month).
      type: dict
    billing:
      description:
        - The billing window as asked (C(requested)) and answered (C(window)), C(pods_amount),
          C(network_volumes_amount), C(total_amount) and C(by_resource) (resource id to USD).
      type: dict
"""

import os

from ansible_collections.trainops.gpu.plugins.module_utils._audit import audit_document, billing_total
from ansible_collections.trainops.gpu.plugins.module_utils._costs import prices
from ansible_collections.trainops.gpu.plugins.module_utils._run_state import RunStateError, load
from ansible_collections.trainops.gpu.plugins.module_utils._runpod_base import RunPodModule
from ansible_collections.trainops.gpu.plugins.module_utils._runpod_resources import (
    pod_summary,
    select_pods,
    volume_summary,
)
from ansible.module_utils.common.dict_transformations import camel_dict_to_snake_dict

STATE_NAME = "state.json"


def state_files(runs_dir) -> list:
    """Every state.json in ``runs_dir`` or one directory below it, sorted (regular files only)."""
    found = []
    for root, dirs, files in os.walk(runs_dir):
        if os.path.normpath(root) != os.path.normpath(runs_dir):
            dirs[:] = []
        path = os.path.normpath(os.path.join(root, STATE_NAME))
        if STATE_NAME in files and os.path.isfile(path) and not os.path.islink(path):
            found.append(path)
    return sorted(found)


class RunPodAuditInfo(RunPodModule):
    def run(self):
        p = self.module.params
        window_given = bool(p["start_time"] or p["end_time"])
        if window_given and not (p["start_time"] and p["end_time"]):
            self.fail("give both start_time and end_time (RFC 3339), or neither")
        if not window_given and not 1 <= p["last_n"] <= 10000:
            self.fail("last_n must be 1 to 10000, got %s" % p["last_n"])
        if not p["prefix"]:
            self.fail("prefix is empty")
        price_rules = prices(p["prices"])
        pods = [pod_summary(pod) for pod in select_pods(self.client.list_pods())]
        volumes = sorted(self.client.list_network_volumes(), key=lambda v: (v.get("name") or "", v.get("id") or ""))
        volumes = [volume_summary(v) for v in volumes]
        if window_given:
            window = dict(start_time=p["start_time"], end_time=p["end_time"], bucket_size=p["bucket_size"])
            requested = dict(window)
        else:
            window = dict(last_n=p["last_n"], bucket_size=p["bucket_size"])
            requested = dict(bucket_size=p["bucket_size"], last_n=p["last_n"])
        billing = {}
        total = 0.0
        for family, key in (("pods", "pods"), ("network-volumes", "network_volumes")):
            report = self.client.billing(family, **window)
            total += billing_total(report)
            billing[key] = camel_dict_to_snake_dict(report)
        billing["total_amount"] = round(total, 6)
        states = []
        try:
            for path in state_files(p["runs_dir"]):
                states.append((path, load(path) or {}))
        except RunStateError as exc:
            self.fail(str(exc))
        audit = audit_document(pods, volumes, states, billing, p["prefix"], price_rules, requested)
        audit["runs_dir"] = os.path.realpath(p["runs_dir"])
        self.result["audit"] = audit


def main():
    module = RunPodAuditInfo.build_module(
        argument_spec=dict(
            prefix=dict(type="str", default="trainops-"),
            runs_dir=dict(type="path", required=True),
            bucket_size=dict(type="str", choices=["hour", "day", "week", "month", "year"], default="day"),
            last_n=dict(type="int", default=30),
            start_time=dict(type="str"),
            end_time=dict(type="str"),
            prices=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    RunPodAuditInfo(module).execute()


if __name__ == "__main__":
    main()
