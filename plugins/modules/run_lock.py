# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# The work is done by the action plugin of the same name (plugins/action/run_lock.py), on the controller.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_lock
short_description: Take or release a run's controller lock (one ansible-playbook owns a run id at a time)
version_added: 0.2.0
description:
  - The lock of a run, C(<runs_dir>/<run_id>/.run.lock) on the controller. Every playbook of the collection
    takes it before it creates, stops, terminates or changes anything of the run, and the roles that act on a
    run (C(trainops.gpu.sync), C(trainops.gpu.teardown)) take it too; a second controller process with the
    same run id fails at that task and changes nothing. Runs on the controller (an action plugin) and needs no
    connection to the host.
  - The lock is a directory made with C(mkdir) (atomic) holding C(owner) (host name, pid and start time of the
    C(ansible-playbook) that holds it, the boot id, the play's name, time). Taking a lock this
    C(ansible-playbook) already holds succeeds (RV(state=held)).
  - A lock of this host whose C(ansible-playbook) is gone (interrupted with Ctrl-C, killed, or its pid reused
    by another process) is taken over at once with a warning (moved aside, then made again, so that of two
    controllers taking over at once one wins). A live holder's lock fails naming it. A lock of another host is
    never taken over (its processes cannot be seen from here); the failure says to remove it by hand when that
    controller is gone.
  - O(state=absent) removes the lock only when this C(ansible-playbook) holds it; another's is left with a
    warning. A playbook that ends without releasing (a failure, Ctrl-C) leaves a lock that its next run takes
    over.
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
  runs_dir:
    description: Directory of the run directories on the controller.
    type: path
    required: true
  run_id:
    description: The run's id (the collection's run-id rule, see the P(trainops.gpu.run_id_problem#filter) filter).
    type: str
    required: true
  state:
    description: V(present) takes the lock, V(absent) releases it.
    type: str
    choices: [present, absent]
    default: present
"""

EXAMPLES = r"""
- name: Own run42 for this playbook
  trainops.gpu.run_lock:
    runs_dir: "{{ playbook_dir }}/../runs"
    run_id: run42
  run_once: true

- name: Release it
  trainops.gpu.run_lock:
    runs_dir: "{{ playbook_dir }}/../runs"
    run_id: run42
    state: absent
  run_once: true
"""

RETURN = r"""
state:
  description: V(acquired), V(held) (already ours), V(took-over), V(released), V(absent) or V(not-owner).
  returned: always
  type: str
path:
  description: The lock directory, C(<runs_dir>/<run_id>/.run.lock).
  returned: always
  type: str
owner:
  description: This lock's owner, C(host) and C(pid) (the C(ansible-playbook)).
  returned: always
  type: dict
previous_owner:
  description: The owner whose lock was taken over (C(host), C(pid), C(start), C(boot), C(play), C(time), C(since)).
  returned: when RV(state=took-over)
  type: dict
"""
