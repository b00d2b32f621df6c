#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: runpod_catalog_info
short_description: Read RunPod's catalog of GPU types and data centers, with availability
version_added: 0.1.0
description:
  - Lists GPU types (prices per GPU and hour, per-cloud ceilings on the GPU count) and data centers
    (region, network volume tiers) from the RunPod REST API v2.
  - With O(availability), adds current pod stock per GPU type and per data center. Stock is a hint for
    ordering placement candidates, not a reservation.
author:
  - trainops.gpu maintainers (!UNKNOWN)
extends_documentation_fragment:
  - trainops.gpu.runpod
  - trainops.gpu.runpod.attributes
  - trainops.gpu.runpod.attributes_info
  - ansible.builtin.action_common_attributes
options:
  gpu_type:
    description:
      - Only this GPU type id.
    type: str
  data_center:
    description:
      - Only this data center id.
    type: str
  availability:
    description:
      - Include current pod availability of GPU types and, per data center, of the GPUs offered there.
    type: bool
    default: false
  gpu_count:
    description:
      - GPU count the availability is computed for.
    type: int
    default: 1
  cloud:
    description:
      - Only GPU types offered on this cloud. With O(availability), availability is computed for this cloud.
    type: str
    choices: [SECURE, COMMUNITY]
seealso:
  - module: trainops.gpu.runpod_pod
"""

EXAMPLES = r"""
- name: Where can I get two RTX 4090s now?
  trainops.gpu.runpod_catalog_info:
    gpu_type: NVIDIA GeForce RTX 4090
    gpu_count: 2
    availability: true
  register: catalog

- name: Data centers with stock
  ansible.builtin.debug:
    msg: "{{ catalog.gpu_types[0].data_centers | selectattr('availability', 'ne', 'NONE') | map(attribute='id') }}"
"""

RETURN = r"""
gpu_types:
  description:
    - GPU types, keys in snake_case (C(id), C(name), C(manufacturer), C(memory), C(secure), C(community),
      C(price), C(max_count), and with O(availability) C(availability), C(data_centers), C(cuda_versions)).
  returned: always
  type: list
  elements: dict
  sample:
    - id: NVIDIA GeForce RTX 4090
      name: RTX 4090
      memory: 24
      max_count: {secure: 8, community: 8}
      price: {secure: 0.69, community: 0.34}
data_centers:
  description:
    - Data centers, keys in snake_case (C(id), C(name), C(region), C(network_volume_types), C(compliance),
      C(global_network), and with O(availability) C(gpu_availability)).
  returned: always
  type: list
  elements: dict
  sample:
    - id: EU-RO-1
      name: Bucharest 1
      region: EUROPE
      network_volume_types: [STANDARD, HIGH_PERFORMANCE]
"""

from ansible.module_utils.common.dict_transformations import camel_dict_to_snake_dict

from ansible_collections.trainops.gpu.plugins.module_utils._runpod_base import RunPodModule


class RunPodCatalogInfo(RunPodModule):
    def run(self):
        p = self.module.params
        if p["gpu_count"] < 1:
            self.fail("gpu_count must be at least 1, got %s" % p["gpu_count"])
        gpus = self.client.list_gpu_types(availability=p["availability"], gpu_count=p["gpu_count"], cloud=p["cloud"])
        centers = self.client.list_data_centers(gpu_availability=p["availability"])
        if p["cloud"]:
            gpus = [g for g in gpus if g.get(p["cloud"].lower())]
        if p["gpu_type"]:
            gpus = [g for g in gpus if g.get("id") == p["gpu_type"]]
        if p["data_center"]:
            centers = [dc for dc in centers if dc.get("id") == p["data_center"]]
        self.result["gpu_types"] = [camel_dict_to_snake_dict(g) for g in gpus]
        self.result["data_centers"] = [camel_dict_to_snake_dict(dc) for dc in centers]


def main():
    module = RunPodCatalogInfo.build_module(
        argument_spec=dict(
            gpu_type=dict(type="str"),
            data_center=dict(type="str"),
            availability=dict(type="bool", default=False),
            gpu_count=dict(type="int", default=1),
            cloud=dict(type="str", choices=["SECURE", "COMMUNITY"]),
        ),
        supports_check_mode=True,
    )
    RunPodCatalogInfo(module).execute()


if __name__ == "__main__":
    main()
