# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""sync_lock: take or release a run directory's controller lock, in ansible-playbook's own process tree.

Runs on the controller with no connection to the host. The owner is this ansible-playbook: the worker that
runs an action is its child, so ``os.getppid()`` names it, and a lock whose ansible-playbook is gone can be
told from a live one (see plugins/module_utils/_sync_lock.py).
"""

from __future__ import annotations

import os
import socket

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.trainops.gpu.plugins.module_utils._sync_lock import LockHeld, acquire, describe, release


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        _validation, args = self.validate_argument_spec(
            argument_spec={
                "path": {"type": "path", "required": True},
                "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
                "stale_minutes": {"type": "int", "default": 30},
            }
        )
        result = super().run(tmp, task_vars)
        if args["stale_minutes"] < 1:
            raise AnsibleActionFail("sync_lock: stale_minutes must be >= 1, got %d" % args["stale_minutes"])
        host, pid = socket.gethostname(), str(os.getppid())
        lock = args["path"]
        result.update(path=lock, owner={"host": host, "pid": pid})
        try:
            if args["state"] == "present":
                state, previous = acquire(lock, host, pid, args["stale_minutes"], dry_run=self._task.check_mode)
                if state == "took-over":
                    result["warnings"] = [
                        "sync: took over a stale lock (%s): its ansible-playbook is gone" % describe(previous)
                    ]
            else:
                state, previous = release(lock, host, pid, dry_run=self._task.check_mode)
                if state == "not-owner":
                    result["warnings"] = ["sync: left %s in place: it is held by %s" % (lock, describe(previous))]
        except LockHeld as exc:
            raise AnsibleActionFail("sync: %s" % exc) from exc
        except OSError as exc:
            raise AnsibleActionFail("sync: cannot %s the lock %s: %s" % (
                "take" if args["state"] == "present" else "release", lock, exc)) from exc  # fmt: skip
        result.update(state=state, changed=False)
        return result
