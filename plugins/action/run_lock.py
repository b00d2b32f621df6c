# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""run_lock: take or release a run's controller lock, in ansible-playbook's own process tree.

Runs on the controller with no connection to the host. The owner is this ansible-playbook: the worker that
runs an action is its child, so ``os.getppid()`` names it, and a lock whose ansible-playbook is gone can be
told from a live one (see plugins/module_utils/_run_lock.py).
"""

from __future__ import annotations

import os
import socket

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.trainops.gpu.plugins.module_utils._run_layout import run_id_problem
from ansible_collections.trainops.gpu.plugins.module_utils._run_lock import (
    LockHeld,
    acquire,
    describe,
    lock_path,
    owner_of,
    release,
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        _validation, args = self.validate_argument_spec(
            argument_spec={
                "runs_dir": {"type": "path", "required": True},
                "run_id": {"type": "str", "required": True},
                "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            }
        )
        result = super().run(tmp, task_vars)
        problem = run_id_problem(args["run_id"])
        if problem:
            raise AnsibleActionFail("run_lock: %s" % problem)
        play = str((task_vars or {}).get("ansible_play_name") or "")
        me = owner_of(socket.gethostname(), os.getppid(), play)
        lock = lock_path(os.path.realpath(args["runs_dir"]), args["run_id"])
        result.update(path=lock, owner={"host": me["host"], "pid": me["pid"]})
        try:
            if args["state"] == "present":
                state, previous = acquire(lock, me, dry_run=self._task.check_mode)
                if state == "took-over":
                    result["previous_owner"] = previous
                    result["warnings"] = [
                        "run %s: took over the lock of a controller that is gone (%s)"
                        % (args["run_id"], describe(previous))
                    ]
            else:
                state, previous = release(lock, me, dry_run=self._task.check_mode)
                if state == "not-owner":
                    result["warnings"] = [
                        "run %s: left %s in place: it is held by %s" % (args["run_id"], lock, describe(previous))
                    ]
        except LockHeld as exc:
            raise AnsibleActionFail("run %s: %s" % (args["run_id"], exc)) from exc
        except OSError as exc:
            raise AnsibleActionFail("run %s: cannot %s the lock %s: %s" % (
                args["run_id"], "take" if args["state"] == "present" else "release", lock, exc)) from exc  # fmt: skip
        result.update(state=state, changed=False)
        return result
