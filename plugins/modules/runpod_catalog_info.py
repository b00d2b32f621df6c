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
  - With O(gpu_type) and O(availability), RV(placement) ranks the data centers where that GPU type has stock now
    (for O(gpu_count), O(cloud) and O(min_cuda_version)), and RV(data_center) names the first, the place to create a
    network volume (it attaches only to pods in its own data center) or a pod.
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
  min_cuda_version:
    description:
      - Lowest acceptable host CUDA version, as C(major.minor) (as M(trainops.gpu.runpod_pod) takes it). Availability,
        and so RV(placement), counts only hosts with this CUDA version or newer.
      - Needs O(gpu_type) and O(availability).
    type: str
  data_center_ids:
    description:
      - The data centers RV(placement) may name, in order of preference, the fallback order among data centers
        with the same stock. Empty, every data center of the catalog is a candidate, equal stock ordered by id.
      - An id the catalog does not list is an error. Needs O(gpu_type) and O(availability).
    type: list
    elements: str
  network_volume_type:
    description:
      - RV(placement) keeps only data centers that offer network volumes of this type.
      - Needs O(gpu_type) and O(availability).
    type: str
    choices: [STANDARD, HIGH_PERFORMANCE]
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

- name: Where to put the network volume of an RTX 4090 run on CUDA 12.8, EU-RO-1 first among equals
  trainops.gpu.runpod_catalog_info:
    gpu_type: NVIDIA GeForce RTX 4090
    availability: true
    min_cuda_version: "12.8"
    data_center_ids: [EU-RO-1, EU-SE-1, US-KS-2]
    network_volume_type: STANDARD
  register: where

- name: Create the volume there
  trainops.gpu.runpod_network_volume:
    name: trainops-run42-ckpt
    data_center: "{{ where.data_center }}"
    size: 50
  when: where.data_center is not none
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
placement:
  description:
    - With O(gpu_type) and O(availability), the data centers where that GPU type has stock now, best first,
      C(HIGH) before C(MEDIUM) before C(LOW), equal stock in the order of O(data_center_ids), then by id. Data
      centers without stock (C(NONE)), outside O(data_center_ids) or without O(network_volume_type) are left out.
    - The first is the choice; the next ones are the fallbacks, should a create there fail for capacity.
    - Empty without O(gpu_type) and O(availability), and when no data center has stock.
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description: Data center id.
      type: str
    name:
      description: Data center name.
      type: str
    availability:
      description: Stock of the GPU type there now, C(HIGH), C(MEDIUM) or C(LOW).
      type: str
    network_volume_types:
      description: Network volume types the data center offers (empty for none).
      type: list
      elements: str
  sample:
    - {id: EU-SE-1, name: Stockholm 1, availability: HIGH, network_volume_types: [STANDARD]}
    - {id: EU-RO-1, name: Bucharest 1, availability: MEDIUM, network_volume_types: [STANDARD, HIGH_PERFORMANCE]}
data_center:
  description: The id of the first data center of RV(placement); null when it is empty.
  returned: always
  type: str
  sample: EU-SE-1
"""

from ansible.module_utils.common.dict_transformations import camel_dict_to_snake_dict

from ansible_collections.trainops.gpu.plugins.module_utils._runpod_base import RunPodModule
from ansible_collections.trainops.gpu.plugins.module_utils._runpod_resources import placement
from ansible_collections.trainops.gpu.plugins.module_utils._runpod_validate import placement_option_problems


class RunPodCatalogInfo(RunPodModule):
    def run(self):
        p = self.module.params
        self.result.update(gpu_types=[], data_centers=[], placement=[], data_center=None)
        if p["gpu_count"] < 1:
            self.fail("gpu_count must be at least 1, got %s" % p["gpu_count"])
        self.check_placement_options()
        gpus = self.client.list_gpu_types(
            availability=p["availability"],
            gpu_count=p["gpu_count"],
            cloud=p["cloud"],
            min_cuda_version=p["min_cuda_version"],
        )
        centers = self.client.list_data_centers(gpu_availability=p["availability"])
        self.check_placement_options(centers)
        ranked = []
        if p["gpu_type"] and p["availability"]:
            entry = next((g for g in gpus if g.get("id") == p["gpu_type"]), None)
            ranked = placement(entry, centers, p["data_center_ids"], p["network_volume_type"])
        self.result["placement"] = ranked
        self.result["data_center"] = ranked[0]["id"] if ranked else None
        if p["cloud"]:
            gpus = [g for g in gpus if g.get(p["cloud"].lower())]
        if p["gpu_type"]:
            gpus = [g for g in gpus if g.get("id") == p["gpu_type"]]
        if p["data_center"]:
            centers = [dc for dc in centers if dc.get("id") == p["data_center"]]
        self.result["gpu_types"] = [camel_dict_to_snake_dict(g) for g in gpus]
        self.result["data_centers"] = [camel_dict_to_snake_dict(dc) for dc in centers]

    def check_placement_options(self, centers=None):
        problems = placement_option_problems(self.module.params, centers)
        if problems:
            self.fail("invalid options: %s" % "; ".join(problems), problems=problems)


def main():
    module = RunPodCatalogInfo.build_module(
        argument_spec=dict(
            gpu_type=dict(type="str"),
            data_center=dict(type="str"),
            availability=dict(type="bool", default=False),
            gpu_count=dict(type="int", default=1),
            cloud=dict(type="str", choices=["SECURE", "COMMUNITY"]),
            min_cuda_version=dict(type="str"),
            data_center_ids=dict(type="list", elements="str"),
            network_volume_type=dict(type="str", choices=["STANDARD", "HIGH_PERFORMANCE"]),
        ),
        supports_check_mode=True,
    )
    RunPodCatalogInfo(module).execute()


if __name__ == "__main__":
    main()
