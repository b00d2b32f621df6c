#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: runpod_network_volume_info
short_description: List RunPod network volumes
version_added: 0.1.0
description:
  - Reads network volumes from the RunPod REST API v2, optionally filtered.
author:
  - trainops.gpu maintainers (!UNKNOWN)
extends_documentation_fragment:
  - trainops.gpu.runpod
  - trainops.gpu.runpod.attributes
  - trainops.gpu.runpod.attributes_info
  - ansible.builtin.action_common_attributes
options:
  id:
    description:
      - Id of one volume. A volume that does not exist gives an empty list, not an error.
    type: str
  name:
    description:
      - Exact volume name.
    type: str
  name_prefix:
    description:
      - Volume name prefix.
    type: str
  data_center:
    description:
      - Only volumes in this data center.
    type: str
seealso:
  - module: trainops.gpu.runpod_network_volume
"""

EXAMPLES = r"""
- name: Volumes in Bucharest
  trainops.gpu.runpod_network_volume_info:
    data_center: EU-RO-1
  register: volumes
"""

RETURN = r"""
network_volumes:
  description: Matching volumes sorted by name then id, in the shape M(trainops.gpu.runpod_network_volume) returns.
  returned: always
  type: list
  elements: dict
  sample:
    - id: agv6w2qcg7
      name: trainops-run42-ckpt
      size: 100
      data_center: EU-RO-1
      type: STANDARD
"""

from ansible_collections.trainops.gpu.plugins.module_utils._runpod_base import RunPodModule
from ansible_collections.trainops.gpu.plugins.module_utils._runpod_resources import volume_summary


class RunPodNetworkVolumeInfo(RunPodModule):
    def run(self):
        p = self.module.params
        if p["id"]:
            volume = self.client.get_network_volume(p["id"])
            volumes = [volume] if volume else []
        else:
            volumes = self.client.list_network_volumes()
        selected = [
            v
            for v in volumes
            if (p["name"] is None or v.get("name") == p["name"])
            and (not p["name_prefix"] or (v.get("name") or "").startswith(p["name_prefix"]))
            and (not p["data_center"] or v.get("dataCenter") == p["data_center"])
        ]
        selected.sort(key=lambda v: (v.get("name") or "", v.get("id") or ""))
        self.result["network_volumes"] = [volume_summary(v) for v in selected]


def main():
    module = RunPodNetworkVolumeInfo.build_module(
        argument_spec=dict(
            id=dict(type="str"),
            name=dict(type="str"),
            name_prefix=dict(type="str"),
            data_center=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    RunPodNetworkVolumeInfo(module).execute()


if __name__ == "__main__":
    main()
