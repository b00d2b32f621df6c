#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: runpod_pod_info
short_description: List RunPod pods by id, name or name prefix
version_added: 0.1.0
description:
  - Reads pods from the RunPod REST API v2. Without filters it returns every pod of the account.
  - Terminated pods are left out unless O(statuses) asks for them.
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
      - Id of one pod. A pod that does not exist gives an empty list, not an error.
    type: str
  name:
    description:
      - Exact pod name. RunPod names are not unique, so several pods may match.
    type: str
  name_prefix:
    description:
      - Name prefix, for example V(trainops-run42-) for every pod of one run.
    type: str
  statuses:
    description:
      - Only pods in these statuses.
    type: list
    elements: str
    choices: [PROVISIONING, STARTING, RUNNING, EXITED, ERROR, TERMINATED]
seealso:
  - module: trainops.gpu.runpod_pod
"""

EXAMPLES = r"""
- name: Every pod of run 42
  trainops.gpu.runpod_pod_info:
    name_prefix: trainops-run42-
  register: run_pods

- name: Pods that still bill compute
  trainops.gpu.runpod_pod_info:
    statuses: [PROVISIONING, STARTING, RUNNING]
  register: running
"""

RETURN = r"""
pods:
  description:
    - Matching pods, sorted by name then id, in the shape M(trainops.gpu.runpod_pod) returns (see its C(pod)).
    - Environment variable values are not returned, only their names.
  returned: always
  type: list
  elements: dict
  sample:
    - id: pod_abc123
      name: trainops-run42-trainer
      status: RUNNING
      ssh_host: 127.0.0.1
      ssh_port: 43122
"""

from ansible_collections.trainops.gpu.plugins.module_utils._runpod import POD_STATUSES
from ansible_collections.trainops.gpu.plugins.module_utils._runpod_base import RunPodModule
from ansible_collections.trainops.gpu.plugins.module_utils._runpod_resources import pod_summary, select_pods


class RunPodPodInfo(RunPodModule):
    def run(self):
        p = self.module.params
        if p["id"]:
            pod = self.client.get_pod(p["id"])
            pods = [pod] if pod else []
        else:
            pods = self.client.list_pods()
        # Terminated pods are history: they are listed only when statuses asks for them.
        pods = select_pods(pods, name=p["name"], name_prefix=p["name_prefix"], statuses=p["statuses"])
        self.result["pods"] = [pod_summary(pod) for pod in pods]


def main():
    module = RunPodPodInfo.build_module(
        argument_spec=dict(
            id=dict(type="str"),
            name=dict(type="str"),
            name_prefix=dict(type="str"),
            statuses=dict(type="list", elements="str", choices=list(POD_STATUSES)),
        ),
        supports_check_mode=True,
    )
    RunPodPodInfo(module).execute()


if __name__ == "__main__":
    main()
