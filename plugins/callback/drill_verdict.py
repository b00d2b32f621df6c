# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""drill_verdict: the resume drill's verdict as the last lines a run prints, after the play recap."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: drill_verdict
type: aggregate
short_description: Print the resume drill's verdict after the play recap
version_added: 0.2.0
description:
  - Watches for the result of M(trainops.gpu.drill_evidence) and, at the end of the run, after the play recap,
    prints the drill's verdict; a table with one row per mode (result, RTO, RPO, the step resumed from) and
    the paths of C(report.md), C(report.json) and C(loss.png).
  - When the drill ran against the local emulator, it says that the emulator is still running and how to stop it.
  - Prints nothing for a run that judged no drill. Enabled in the collection's C(ansible.cfg)
    (C(callbacks_enabled = trainops.gpu.drill_verdict)); enable it the same way in yours.
requirements:
  - enable in configuration
author:
  - trainops.gpu maintainers (!UNKNOWN)
"""

import os

from ansible.plugins.callback import CallbackBase
from ansible_collections.trainops.gpu.plugins.module_utils._drill_verdict import verdict_lines

EVIDENCE_ACTIONS = ("trainops.gpu.drill_evidence", "drill_evidence")


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "trainops.gpu.drill_verdict"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._evidence = None
        self._plan = None

    def _remember(self, result):
        # ansible-core 2.19 names them task and result; 2.17 and 2.18 only _task and _result.
        action = (getattr(result, "task", None) or result._task).action
        returned = getattr(result, "result", None) or result._result
        if action in EVIDENCE_ACTIONS and isinstance(returned, dict) and returned.get("report"):
            self._evidence = returned
        facts = returned.get("ansible_facts") if isinstance(returned, dict) else None
        if isinstance(facts, dict) and isinstance(facts.get("resume_drill_plan"), dict):
            self._plan = facts["resume_drill_plan"]

    def v2_runner_on_ok(self, result):
        self._remember(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._remember(result)

    def v2_playbook_on_stats(self, stats):
        if self._evidence is None:
            return
        # make's default emulator (state/emulator under the checkout) needs no EMULATOR_STATE to be stopped.
        state_dir = os.environ.get("RUNPOD_EMULATOR_STATE_DIR", "")
        if state_dir and os.path.realpath(state_dir) == os.path.realpath(os.path.join("state", "emulator")):
            state_dir = ""
        for line in verdict_lines(self._evidence, self._plan, emulator_state_dir=state_dir):
            self._display.display(line)
