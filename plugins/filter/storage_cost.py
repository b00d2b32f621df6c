# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A pod's storage bill for the teardown role: the one price definition in plugins/module_utils/_costs.py."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: storage_cost
short_description: What a pod's storage bills, running and stopped
version_added: 0.2.0
description:
  - Prices a pod's disks by the collection's one storage price definition (C(plugins/module_utils/_costs.py)),
    the one the cost audit (M(trainops.gpu.runpod_audit_info)) uses.
  - A stopped pod bills its volume disk at the stopped rate and no container disk (it is wiped).
  - The same file holds the filter C(trainops.gpu.billing_now) (arguments the pod id, default the pod's own,
    then the same C(prices), then C(read)), which says what a run leaves billing on one pod, as a dict C({pod, status,
    cost_per_hour, bills, sentence}); C(bills) is C(compute), C(storage), C(nothing) (a pod the API no longer
    lists, V(null) or V({}), bills nothing) or C(unknown) (C(read) false, the API could not be read); and the
    filter C(trainops.gpu.volume_billing_now), the same for a network volume the API still lists
    (C({network_volume, cost_per_hour, sentence})).
options:
  _input:
    description: The pod as M(trainops.gpu.runpod_pod_info) returns it; V(null) prices no disk.
    type: raw
    required: true
  prices:
    description:
      - Prices in USD per GB-month that differ from the published ones; keys not given keep the published
        price.
    type: dict
    default: {}
author:
  - trainops.gpu maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: State what the stopped pod bills
  ansible.builtin.debug:
    msg: "{{ (pod | trainops.gpu.storage_cost).stopped_per_month }} USD per month"
"""

RETURN = r"""
_value:
  description:
    - C(volume_gb), C(container_disk_gb), C(stopped_per_month), C(stopped_per_hour),
      C(running_storage_per_month) (USD, rounded to 6 places) and C(prices) (the prices used).
  type: dict
"""

from ansible_collections.trainops.gpu.plugins.module_utils._costs import (
    billing_now,
    pod_storage,
    prices,
    volume_billing_now,
)


def _storage_cost(pod, price_overrides=None):
    return pod_storage(pod if isinstance(pod, dict) else {}, prices(price_overrides))


def _billing_now(pod, pod_id=None, price_overrides=None, read=True):
    pod = pod if isinstance(pod, dict) else None
    return billing_now(pod, pod_id or (pod or {}).get("id"), prices(price_overrides), bool(read))


def _volume_billing_now(volume, price_overrides=None):
    return volume_billing_now(volume if isinstance(volume, dict) else {}, prices(price_overrides))


class FilterModule:
    def filters(self):
        return {"storage_cost": _storage_cost, "billing_now": _billing_now, "volume_billing_now": _volume_billing_now}
