# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# The work is done by the action plugin of the same name (plugins/action/sync_lock.py), on the controller.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sync_lock
short_description: Take or release a run directory's controller lock (one controller syncs a run at a time)
version_added: 0.1.0
description:
  - The lock of the C(trainops.gpu.sync) role, C(<runs_dir>/<run_id>/.sync.lock) on the controller. Runs on the
    controller (an action plugin) and needs no connection to the host.
  - The lock is a directory made with C(mkdir) (atomic) holding C(owner) (host name, pid of the
    C(ansible-playbook) that holds it, time). Taking a lock this C(ansible-playbook) already holds succeeds
    (RV(state=held)); anyone else's lock fails naming its holder.
  - A lock of this host whose C(ansible-playbook) is gone and which is older than O(stale_minutes) is taken over
    with a warning (moved aside, then made again, so that of two controllers taking over at once one wins). A
    lock of another host is never taken over.
  - O(state=absent) removes the lock only when this C(ansible-playbook) holds it; another's is left with a warning.
author:
  - trainops.gpu maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
attributes:
  action:
    support: full
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
    details:
      - In check mode nothing is written; RV(state) is what the task would do, and a lock held by another
        owner fails as it would.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  path:
    description: The lock directory, C(<runs_dir>/<run_id>/.sync.lock).
    type: path
    required: true
  state:
    description: V(present) takes the lock, V(absent) releases it.
    type: str
    choices: [present, absent]
    default: present
  stale_minutes:
    description: Age after which a lock of this host whose C(ansible-playbook) is gone is taken over.
    type: int
    default: 30
"""

EXAMPLES = r"""
- name: Lock the run directory for this play
  trainops.gpu.sync_lock:
    path: "{{ playbook_dir }}/../runs/run42/.sync.lock"
  run_once: true

- name: Release it
  trainops.gpu.sync_lock:
    path: "{{ playbook_dir }}/../runs/run42/.sync.lock"
    state: absent
  run_once: true
"""

RETURN = r"""
state:
  description: V(acquired), V(held) (already ours), V(took-over), V(released), V(absent) or V(not-owner).
  returned: always
  type: str
path:
  description: The lock directory.
  returned: always
  type: str
owner:
  description: This lock's owner, C(host) and C(pid) (the C(ansible-playbook)).
  returned: always
  type: dict
"""
