#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: teardown_gate
short_description: Judge whether a pod may be terminated, naming every missing piece
version_added: 0.2.0
description:
  - The teardown role's gate (docs/teardown.md), as a pure judgement over facts the role gathered. Nothing is
    terminated until the pod's newest checkpoint is either (a) pulled to the controller and verified there by
    loading it, or (b) on a network volume that exists on the account and loaded on the pod; and the operator
    named the pod (O(confirm)).
  - Reads nothing and changes nothing. Returns RV(ok), RV(errors) (one sentence per missing piece, saying how
    to supply it) and RV(checks).
  - Call it once the pod's checkpoints are read; when RV(needs_pulled) is true, gather the pulled copy and
    call it again with O(pulled).
author:
  - trainops.gpu maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - It changes nothing; in check mode the advice for a stopped pod says that check mode starts nothing.
  diff_mode:
    support: none
  platform:
    platforms: all
options:
  pod:
    description: The pod as M(trainops.gpu.runpod_pod_info) returns it.
    type: dict
    required: true
  reachable:
    description: Whether the pod runs and SSH answers, so its durable root can be read.
    type: bool
    required: true
  durable_root:
    description: The pod's durable root (where C(trainops/<run_id>/ckpt) is); empty when it has none.
    type: str
    default: ""
  on_volume:
    description: Whether the durable root is on the pod's network volume.
    type: bool
    default: false
  pod_checks:
    description:
      - What the teardown role's C(pod_checks) found on the pod (C(root), C(exists), C(error), C(checkpoints)
        newest first as M(trainops.gpu.checkpoint_verify) returns them, C(loaded)). Omitted when the pod could
        not be read.
    type: dict
  volumes:
    description: M(trainops.gpu.runpod_network_volume_info)'s C(network_volumes) for the pod's network volume.
    type: list
    elements: dict
  pulled:
    description:
      - The pulled copy of the newest checkpoint on the controller, for (a) - C(path), C(exists), C(verify)
        (M(trainops.gpu.checkpoint_verify) with load on it, as registered) and C(controller_has) (the step
        directories there).
    type: dict
  confirm:
    description: The operator's confirmation; must be the pod's id or name.
    type: str
    default: ""
  allow_no_known_checkpoint:
    description:
      - Let the gate pass a pod with no known checkpoint - none under its durable root, no durable root, or a
        durable root that cannot be read (a stopped pod, SSH down). A checkpoint that was read must still pass,
        and RV(would_lose) says what terminating deletes either way.
      - The alias O(allow_no_checkpoint) is deprecated (its name said "there is none", while it also let a pod
        whose checkpoints were never read go).
    type: bool
    default: false
    aliases: [allow_no_checkpoint]
  controller_has:
    description: The run's checkpoint directories pulled to the controller (their names), for RV(would_lose).
    type: list
    elements: str
    default: []
  start_stopped:
    description: Whether the role was asked to start a stopped pod for the checks (only changes the advice).
    type: bool
    default: false
seealso:
  - module: trainops.gpu.checkpoint_verify
"""

EXAMPLES = r"""
- name: Judge the gate
  trainops.gpu.teardown_gate:
    pod: "{{ pod }}"
    reachable: true
    durable_root: /workspace
    pod_checks: "{{ teardown_pod_checks }}"
    confirm: "{{ teardown_confirm }}"
  register: gate

- name: Refuse, naming what is missing
  ansible.builtin.fail:
    msg: "{{ gate.errors | join(' ') }}"
  when: not gate.ok
"""

RETURN = r"""
ok:
  description: Whether every check passed, so the pod may be terminated.
  returned: always
  type: bool
  sample: false
errors:
  description: What is missing, one sentence each, in the order the gate checks; empty when RV(ok).
  returned: always
  type: list
  elements: str
  sample: ["teardown_confirm is empty: set teardown_confirm=abc123 (or trainops-r1-train) to terminate pod ..."]
checks:
  description:
    - C(volume) for (b) when the durable root is on a network volume (C(found), C(loaded), C(ok), C(reason),
      ...), C(pulled) for (a) when it was judged (C(path), C(exists), C(valid), C(manifest_sha256),
      C(errors), C(ok), C(controller_has), ...).
  returned: always
  type: dict
newest:
  description: The pod's newest checkpoint as M(trainops.gpu.checkpoint_verify) reported it; null when unknown.
  returned: always
  type: dict
needs_pulled:
  description: The newest checkpoint is valid and (b) did not pass, so (a) must be judged (give O(pulled)).
  returned: always
  type: bool
would_lose:
  description:
    - What terminating the pod deletes of the run's checkpoints, read wherever it can be - C(read) (the durable
      root was read), C(on_pod) and C(lost) (checkpoint names; null when not read), C(controller_has) and
      C(sentence) (the same in words).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.trainops.gpu.plugins.module_utils._teardown_gate import judge


def main():
    module = AnsibleModule(
        argument_spec=dict(
            pod=dict(type="dict", required=True),
            reachable=dict(type="bool", required=True),
            durable_root=dict(type="str", default=""),
            on_volume=dict(type="bool", default=False),
            pod_checks=dict(type="dict"),
            volumes=dict(type="list", elements="dict"),
            pulled=dict(type="dict"),
            confirm=dict(type="str", default="", no_log=False),
            allow_no_known_checkpoint=dict(
                type="bool",
                default=False,
                aliases=["allow_no_checkpoint"],
                deprecated_aliases=[
                    dict(name="allow_no_checkpoint", version="1.0.0", collection_name="trainops.gpu"),
                ],
            ),
            start_stopped=dict(type="bool", default=False),
            controller_has=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    answer = judge(
        p["pod"],
        p["reachable"],
        p["durable_root"],
        p["on_volume"],
        pod_checks=p["pod_checks"],
        volumes=p["volumes"],
        pulled=p["pulled"],
        confirm=p["confirm"],
        allow_no_known_checkpoint=p["allow_no_known_checkpoint"],
        start_stopped=p["start_stopped"],
        check_mode=module.check_mode,
        controller_has=p["controller_has"],
    )
    module.exit_json(changed=False, **answer)


if __name__ == "__main__":
    main()
