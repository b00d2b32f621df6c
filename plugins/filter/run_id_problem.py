# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The run-id rule for roles and playbooks: the one definition in plugins/module_utils/_run_layout.py."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: run_id_problem
short_description: What is wrong with a run id, or an empty string
version_added: 0.2.0
description:
  - Checks a run id against the collection's one run-id rule (the trainer, the provenance and run_state
    modules, and every role and playbook use it) and returns an empty string when it holds, else a sentence
    naming the value and the rule.
  - A run id is 1 to O(max_length) letters, digits, C(.), C(_) or C(-), starting with a letter or digit. A
    trailing line break is not accepted.
options:
  _input:
    description: The run id to check.
    type: raw
    required: true
  max_length:
    description:
      - The longest run id accepted. Callers that derive longer names from it (pod names, a drill's per-mode
        run ids) pass a smaller one.
    type: int
    default: 128
  name:
    description: The variable's name, as the sentence names it.
    type: str
    default: run_id
author:
  - trainops.gpu maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Check the run id before anything is created
  ansible.builtin.assert:
    that: smoke_run_id | trainops.gpu.run_id_problem(64, 'smoke_run_id') == ''
    fail_msg: "{{ smoke_run_id | trainops.gpu.run_id_problem(64, 'smoke_run_id') }}"
"""

RETURN = r"""
_value:
  description: An empty string for a valid run id, else what is wrong with it.
  type: str
"""

from ansible_collections.trainops.gpu.plugins.module_utils._run_layout import RUN_ID_MAX_LENGTH, run_id_problem


def _run_id_problem(value, max_length=RUN_ID_MAX_LENGTH, name="run_id"):
    return run_id_problem(value, int(max_length), name)


class FilterModule:
    def filters(self):
        return {"run_id_problem": _run_id_problem}
