#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: runpod_ssh_key
short_description: Register or remove one SSH public key on the RunPod account
version_added: 0.1.0
description:
  - RunPod keeps one set of SSH public keys per account and replaces the whole set on every update.
    This module changes one key and keeps every other key as it is.
  - Pods created with C(startSsh) (the default of M(trainops.gpu.runpod_pod)) get the keys registered at
    their creation; a key added later reaches only pods created later.
  - Keys are compared by type and key material; the comment does not matter.
author:
  - trainops.gpu maintainers (!UNKNOWN)
extends_documentation_fragment:
  - trainops.gpu.runpod
  - trainops.gpu.runpod.attributes
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads the registered keys but never replaces them.
  diff_mode:
    support: full
options:
  key:
    description:
      - The public key, one C(authorized_keys) line, for example the content of C(~/.ssh/id_ed25519.pub).
    type: str
    required: true
  state:
    description:
      - V(present) registers the key if it is not registered yet.
      - V(absent) removes this key (every entry with its key material) and keeps the others.
    type: str
    choices: [present, absent]
    default: present
seealso:
  - module: trainops.gpu.runpod_pod
"""

EXAMPLES = r"""
- name: Register the controller's key
  trainops.gpu.runpod_ssh_key:
    key: "{{ lookup('ansible.builtin.file', '~/.ssh/id_ed25519.pub') }}"

- name: Remove a departed colleague's key, keeping everyone else's
  trainops.gpu.runpod_ssh_key:
    key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE0aOZuI0aOZuI0aOZuI0aOZuI0aOZuI0aOZuI0aOZuI old@laptop"
    state: absent
"""

RETURN = r"""
ssh_keys:
  description: The account's registered public keys after the change (or as they would be, in check mode).
  returned: always
  type: list
  elements: str
  sample:
    - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILXGDN/SclOozk1xsDztpmhGiKkkrfQB9SKoO8dSIQQZ me@example.com
"""

from ansible_collections.trainops.gpu.plugins.module_utils._runpod_base import RunPodModule
from ansible_collections.trainops.gpu.plugins.module_utils._runpod_resources import ssh_key_identity


def updated_keys(registered, key, state) -> list:
    """The key set after making ``key`` present or absent; other entries keep their order and text."""
    identity = ssh_key_identity(key)
    if state == "absent":
        return [k for k in registered if ssh_key_identity(k) != identity]
    if any(ssh_key_identity(k) == identity for k in registered):
        return list(registered)
    return [*registered, key.strip()]


class RunPodSshKey(RunPodModule):
    def run(self):
        p = self.module.params
        if ssh_key_identity(p["key"]) is None:
            self.fail(
                "key is not an authorized_keys line of the form '<type> <base64-key> [comment]' with a type "
                "starting ssh-, ecdsa- or sk-; nothing was changed"
            )
        registered = self.client.get_ssh_keys()
        wanted = updated_keys(registered, p["key"], p["state"])
        self.result["ssh_keys"] = wanted
        if wanted == list(registered):
            return
        self.mark_changed()
        if self.module._diff:
            self.result["diff"] = {"before": "\n".join(registered) + "\n", "after": "\n".join(wanted) + "\n"}
        if not self.module.check_mode:
            self.result["ssh_keys"] = self.client.put_ssh_keys(wanted)


def main():
    module = RunPodSshKey.build_module(
        argument_spec=dict(
            key=dict(type="str", required=True, no_log=False),
            state=dict(type="str", default="present", choices=["present", "absent"]),
        ),
        supports_check_mode=True,
    )
    RunPodSshKey(module).execute()


if __name__ == "__main__":
    main()
