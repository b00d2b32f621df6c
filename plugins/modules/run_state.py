#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_state
short_description: Record what a run created in runs/<run_id>/state.json, or read it back
version_added: 0.1.0
description:
  - Keeps C(<runs_dir>/<run_id>/state.json) on the controller, the file in which every playbook records each
    resource a run creates or uses (pods, network volumes, SSH keys, ...) the moment it exists. The audit
    reads these files to tell a run's resources from orphans; teardown reads them to know what to clean up.
  - V(present) upserts O(resources) by their C(kind) and C(id) (fields merged, dicts recursively; the first
    C(recorded_at) kept; C(updated_at) set when a field changed) and merges O(run) into the top level.
    A resource recorded with C(action=created) keeps that action.
  - Writes are atomic (temporary file, fsync, rename, directory fsync) under an exclusive lock on
    C(state.json.lock), so concurrent writers lose nothing and readers never see a half-written file.
    Nothing is written when nothing changed; C(changed) ignores the timestamps.
  - Keys named like secrets (C(api_key), C(token), C(secret), C(password), C(credential), C(private_key),
    any case, at any depth) are refused before anything is written.
  - The modules M(trainops.gpu.runpod_pod) and M(trainops.gpu.runpod_network_volume) write the same file
    themselves through their C(record_to) option, right after the create call returns.
  - See docs/modules.md for the document's fields.
author:
  - trainops.gpu maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads the file and returns the document as it would be written; writes nothing, takes no lock.
  diff_mode:
    support: full
  platform:
    platforms: posix
options:
  runs_dir:
    description:
      - Directory of the run directories on the controller; the file is C(<runs_dir>/<run_id>/state.json).
      - Mutually exclusive with O(path); one of them is required.
    type: path
  path:
    description:
      - Path of the state file itself, instead of O(runs_dir).
    type: path
  run_id:
    description:
      - The run's id. 1 to 128 letters, digits, C(.), C(_) or C(-), starting with a letter or digit.
      - Required with O(runs_dir). With O(path) it defaults to the run id of an existing file, else to the name
        of the file's directory. A file of another run is an error.
    type: str
  resources:
    description:
      - Resources to record. Each needs C(kind) (V(pod), V(network_volume), V(ssh_key), ...) and C(id); any
        other field is recorded as given (C(name), C(role), C(action) V(created), V(reused) or V(registered),
        C(status), C(final) with C(status), C(read_at) and C(source)).
    type: list
    elements: dict
    default: []
  run:
    description:
      - Top-level fields of the document to set, such as C(api_url) or C(started_at). C(format_version),
        C(run_id), C(updated_at) and C(resources) belong to the writer.
    type: dict
    default: {}
  state:
    description:
      - V(present) records; V(query) only reads the file (a missing file returns an empty O(state)).
    type: str
    choices: [present, query]
    default: present
  lock_timeout:
    description:
      - Seconds to wait for another writer's lock, 1 to 600.
    type: int
    default: 30
  pod:
    description:
      - With O(state=query), a pod (C(id), C(name)) to look up across the runs next to this one. RV(pod_runs)
        names every run whose C(state.json) records its id, and the run its name carries
        (C(<prefix>-<run_id>-<role>), when that run's directory exists).
    type: dict
  pod_name_prefix:
    description: The prefix of the collection's pod names, for O(pod).
    type: str
    default: trainops
seealso:
  - module: trainops.gpu.runpod_pod
  - module: trainops.gpu.runpod_network_volume
"""

EXAMPLES = r"""
- name: Start the run's state file
  trainops.gpu.run_state:
    runs_dir: "{{ playbook_dir }}/../runs"
    run_id: "{{ run_id }}"
    run:
      api_url: "{{ runpod_api_url }}"
      started_at: "{{ now(utc=true, fmt='%Y-%m-%dT%H:%M:%SZ') }}"

- name: Record the registered SSH key
  trainops.gpu.run_state:
    runs_dir: "{{ playbook_dir }}/../runs"
    run_id: "{{ run_id }}"
    resources:
      - kind: ssh_key
        id: "{{ key_path }}.pub"
        action: registered
        status: registered

- name: Read the run's resources
  trainops.gpu.run_state:
    runs_dir: "{{ playbook_dir }}/../runs"
    run_id: "{{ run_id }}"
    state: query
  register: run_state

- name: Pods this run created
  ansible.builtin.debug:
    msg: "{{ run_state.state.resources | selectattr('kind', 'eq', 'pod') | selectattr('action', 'eq', 'created') }}"
"""

RETURN = r"""
state:
  description: The document after the change (in check mode, as it would be); empty when there is none.
  returned: always
  type: dict
  contains:
    format_version:
      description: Format of the document, 1.
      type: int
    run_id:
      description: The run's id.
      type: str
    api_url:
      description: API the run's resources live in, when recorded.
      type: str
    started_at:
      description: When the document was started (UTC, C(YYYY-MM-DDTHH:MM:SSZ)) unless O(run) set it.
      type: str
    updated_at:
      description: Last change (UTC).
      type: str
    resources:
      description: The resources, in the order they were first recorded.
      type: list
      elements: dict
state_file:
  description:
    - Path of the state file. It is not returned as C(path), since Ansible would then replace C(state) with
      the file's type.
  returned: always
  type: str
  sample: /home/me/trainops/runs/run42/state.json
pod_runs:
  description:
    - With O(pod), the runs the pod belongs to, sorted (this run among them when it does). A teardown under one run
      id takes the lock of the others too, so that it never ends a pod another live run is using.
  returned: when O(state=query) and O(pod) are given
  type: list
  elements: str
  sample: [run42]
pods_not_terminated:
  description:
    - With O(state=query), the recorded pods whose last recorded status (their C(final) entry's, else their
      C(status)) is not C(TERMINATED) - running, stopped (a stopped pod still bills its volume disk) or unknown.
  returned: when O(state=query)
  type: list
  elements: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.trainops.gpu.plugins.module_utils._run_state import (
    STATE_NAME,
    RunStateError,
    check_run_id,
    load,
    pods_not_terminated,
    record,
    runs_of_pod,
    secret_values,
)


def resolve(params):
    """(state file, run id) from the options; RunStateError naming what is wrong."""
    if params["runs_dir"] is not None:
        if not params["run_id"]:
            raise RunStateError("run_id is required with runs_dir")
        run_id = check_run_id(params["run_id"])
        return os.path.join(params["runs_dir"], run_id, STATE_NAME), run_id
    path = params["path"]
    if params["run_id"]:
        return path, check_run_id(params["run_id"])
    existing = load(path)
    if existing and existing.get("run_id"):
        return path, check_run_id(existing["run_id"])
    return path, check_run_id(os.path.basename(os.path.dirname(os.path.abspath(path))))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            runs_dir=dict(type="path"),
            path=dict(type="path"),
            run_id=dict(type="str"),
            resources=dict(type="list", elements="dict", default=[]),
            run=dict(type="dict", default={}),
            state=dict(type="str", default="present", choices=["present", "query"]),
            lock_timeout=dict(type="int", default=30),
            pod=dict(type="dict"),
            pod_name_prefix=dict(type="str", default="trainops"),
        ),
        required_one_of=[("runs_dir", "path")],
        mutually_exclusive=[("runs_dir", "path")],
        supports_check_mode=True,
    )
    p = module.params
    # A refused record must not show the secret it carried in module_args.
    module.no_log_values.update(secret_values({"resources": p["resources"], "run": p["run"]}))
    result = dict(changed=False, state={}, state_file=None)
    if not 1 <= p["lock_timeout"] <= 600:
        module.fail_json(msg="lock_timeout must be 1 to 600 seconds, got %s" % p["lock_timeout"], **result)
    try:
        path, run_id = resolve(p)
        result["state_file"] = path
        before = load(path, run_id)
        if p["state"] == "query":
            result["state"] = before or {}
            result["pods_not_terminated"] = pods_not_terminated(before)
            if p["pod"] is not None:
                runs_dir = os.path.dirname(os.path.dirname(os.path.abspath(path)))
                pod_id, pod_name = str(p["pod"].get("id") or ""), str(p["pod"].get("name") or "")
                result["pod_runs"] = runs_of_pod(runs_dir, pod_id, pod_name, p["pod_name_prefix"])
            module.exit_json(**result)
        document, changed = record(
            path, run_id, p["resources"], p["run"], lock_timeout_s=p["lock_timeout"], check_mode=module.check_mode
        )
    except RunStateError as exc:
        module.fail_json(msg=str(exc), **result)
    result.update(state=document, changed=changed)
    if changed and module._diff:
        result["diff"] = {"before": before or {}, "after": document}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
