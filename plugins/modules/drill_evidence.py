#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: drill_evidence
short_description: Judge a resume drill and write its evidence (report.json, report.md, loss.png)
version_added: 0.1.0
description:
  - Compares each drilled run (interrupted, then resumed to the end) with an uninterrupted reference run of
    the same config, from the files the drill pulled to the controller, and writes the evidence to
    O(evidence_dir) (normally C(runs/<run_id>/evidence)). Run it on C(localhost).
  - Journals are read with the trainer's rules (a torn last line is dropped). Every step's C(loss_hex) and
    C(lr_hex) must spell the same float bits as the reference's; the first differing step, missing steps and
    extra steps are named.
  - The step resumed from is the C(step) of the first C(resume) event in events.jsonl stamped after the
    interruption. RPO (steps lost) is O(modes[].last_step_before) minus that step. RTO (seconds) is the
    C(wall_time) of the journal's first step past that step minus O(modes[].interrupted_at).
  - A mode passes only when its journal and the final weights hash (C(weights_sha256) of result.json) equal
    the reference's, the resumed run finished, the orchestration reported no error, and the checkpoint
    resumed from verified (O(modes[].checkpoint_verify)).
  - C(report.json) holds every figure, the pods and ports before and after, and the provenance summary;
    C(report.md) the verdict table, phase timings and wall time; C(loss.png) the loss of the reference and of
    each resumed run against step, with the interruption and the step resumed from marked.
  - Files are written atomically, and only when their content changes; a second run on the same inputs
    changes nothing. See docs/evidence.md.
author:
  - trainops.gpu maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - In check mode everything is judged and rendered and nothing is written; C(changed) says whether any
        file would change.
  diff_mode:
    support: none
  platform:
    platforms: posix
requirements:
  - matplotlib (the Python package, on the controller) to draw loss.png
options:
  evidence_dir:
    description:
      - Directory of the evidence files, created when missing (normally C(<runs_dir>/<run_id>/evidence)).
    type: path
    required: true
  run_id:
    description:
      - The drill's run id (letters, digits, C(.), C(_), C(-); starting with a letter or digit).
    type: str
    required: true
  provenance:
    description:
      - Path of the run's C(provenance.json) (from M(trainops.gpu.provenance)); its commit, dirty flag, command and
        config hash go into the report. An unreadable file fails the module.
    type: path
  reference:
    description:
      - The uninterrupted reference run's pulled files. It must have finished with a C(weights_sha256).
    type: dict
    required: true
    suboptions:
      metrics:
        description: Path of its C(metrics.jsonl).
        type: path
        required: true
      result:
        description: Path of its C(result.json).
        type: path
        required: true
      events:
        description:
          - Path of its C(events.jsonl). The config hash in its C(start) events is the config hash that ran,
            named in every evidence file; without it the one of O(provenance) is named.
        type: path
  modes:
    description:
      - One entry per drilled mode, each a run interrupted once and resumed to the end.
    type: list
    elements: dict
    required: true
    suboptions:
      mode:
        description:
          - The mode's name (V(kill), V(sigterm), V(stop_start), V(recreate), V(host_failure), V(no_gpu), ...).
        type: str
        required: true
      metrics:
        description:
          - Path of the drilled run's pulled C(metrics.jsonl) after it finished. Required unless O(modes[].error).
        type: path
      events:
        description: Path of its pulled C(events.jsonl). Required unless O(modes[].error).
        type: path
      result:
        description: Path of its pulled C(result.json). Required unless O(modes[].error).
        type: path
      interrupted_at:
        description:
          - When the interruption was sent, in epoch seconds on the controller's clock. Required unless
            O(modes[].error).
        type: float
      last_step_before:
        description: The last journal step seen on the pod at the interruption.
        type: int
      checkpoint_verify:
        description:
          - The registered result of M(trainops.gpu.checkpoint_verify) for the checkpoint resumed from (or for the
            root that holds it). Null when none was verified, which fails the mode.
        type: dict
      pods:
        description: The pod before and after the interruption, each C({id, port}), for the report.
        type: dict
      timings:
        description: Seconds per phase of this mode, for the report.
        type: dict
      error:
        description: The orchestration of this mode failed; the mode fails with this reason.
        type: str
      notes:
        description: Free text for the report.
        type: str
      clock_offset_s:
        description:
          - The pod's clock minus the controller's, in seconds, when the drill measured it. Subtracted from the
            pod's times before RTO is computed. Without it the two clocks are taken as equal (one clock on the
            emulator) and the report says so.
        type: float
      clock_offset_error_s:
        description: The bound of the error of O(modes[].clock_offset_s) (half the round trip of the measurement).
        type: float
  phases:
    description:
      - Seconds spent in each phase of the whole drill (provisioning, bootstrap, sync, training, interruption,
        recovery, teardown), for the report.
    type: dict
    default: {}
  wall_s:
    description: The drill's wall time in seconds, for the report.
    type: float
  fail_on_mismatch:
    description:
      - Fail when any mode failed, naming each failed mode and its reason (the first differing step for a
        journal). The evidence is written first either way.
    type: bool
    default: true
notes:
  - The interruption time is the controller's clock; journal and event times are the pod's. On the emulator they
    are one clock. On RunPod a skew between them adds to RTO unless O(modes[].clock_offset_s) is given; a pod
    clock behind the controller's by more than the recovery time makes RTO unknown (null, with a note).
seealso:
  - module: trainops.gpu.checkpoint_verify
  - module: trainops.gpu.provenance
"""

EXAMPLES = r"""
- name: Judge the drill and write the evidence
  trainops.gpu.drill_evidence:
    evidence_dir: "{{ playbook_dir }}/runs/{{ run_id }}/evidence"
    run_id: "{{ run_id }}"
    provenance: "{{ playbook_dir }}/runs/{{ run_id }}/provenance.json"
    reference:
      metrics: "{{ pulled }}/reference/logs/metrics.jsonl"
      result: "{{ pulled }}/reference/logs/result.json"
    modes:
      - mode: kill
        metrics: "{{ pulled }}/kill/logs/metrics.jsonl"
        events: "{{ pulled }}/kill/logs/events.jsonl"
        result: "{{ pulled }}/kill/logs/result.json"
        interrupted_at: "{{ kill_sent_at }}"
        last_step_before: "{{ kill_last_step }}"
        checkpoint_verify: "{{ kill_ckpt }}"
        pods: {before: {id: "{{ pod_id }}", port: 40022}, after: {id: "{{ pod_id }}", port: 40022}}
        timings: {interruption: 0.2, recovery: 6.1}
    phases: {provisioning: 12.0, bootstrap: 8.5, sync: 3.1, training: 40.2, interruption: 1.0, recovery: 30.4}
    wall_s: 120.3
  delegate_to: localhost
  register: evidence
"""

RETURN = r"""
passed:
  description: Whether every mode passed.
  returned: always
  type: bool
  sample: true
failed_modes:
  description: Names of the modes that failed.
  returned: always
  type: list
  elements: str
  sample: [kill]
modes:
  description:
    - Per mode, every figure of report.json. The main ones are listed here. See docs/evidence.md for the others.
  returned: always
  type: list
  elements: dict
  contains:
    mode:
      description: The mode's name.
      type: str
    status:
      description: V(PASS) or V(FAIL).
      type: str
    reason:
      description:
        - Why it failed, for a person to read (all reasons joined by C(; )); a short confirmation when it passed.
      type: str
    reasons:
      description:
        - Each reason it failed, in this order. The orchestration's error, the journal, the weights, the
          checkpoint, the outcome.
      type: list
      elements: str
    first_differing_step:
      description: The first step whose journal line differs, is missing or is extra; null when the journals agree.
      type: int
    resumed_from_step:
      description: The step of the first C(resume) event after the interruption.
      type: int
    rpo_steps:
      description: O(modes[].last_step_before) minus RV(modes[].resumed_from_step).
      type: int
    rto_s:
      description: Seconds from the interruption to the first journal step past the step resumed from.
      type: float
    checkpoint:
      description: C(verified), C(step), C(name) and C(detail) of the checkpoint resumed from.
      type: dict
    journal:
      description: The comparison. C(equal), C(steps_compared), C(missing), C(extra), C(differences) and the others.
      type: dict
    weights:
      description: C(equal), C(reference) and C(resumed) weights sha256.
      type: dict
  sample: [{"mode": "kill", "status": "PASS", "rto_s": 4.2, "rpo_steps": 100, "resumed_from_step": 500}]
report:
  description: Paths of the evidence files.
  returned: always
  type: dict
  sample: {"json": "/runs/r1/evidence/report.json", "md": "/runs/r1/evidence/report.md",
           "png": "/runs/r1/evidence/loss.png"}
msg:
  description: The verdict in one line (on failure, each failed mode with its reason).
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.trainops.gpu.plugins.module_utils._drill_evidence import (
    LOSS_PNG_NAME,
    REPORT_JSON_NAME,
    REPORT_MD_NAME,
    EvidenceError,
    PlotLibraryMissing,
    build_report,
    failure_message,
    files_to_change,
    keep_volatile,
    render_markdown,
    render_png,
    report_json_bytes,
    write_files,
)
from ansible_collections.trainops.gpu.plugins.module_utils._provenance import (
    ProvenanceError,
    atomic_write,
    validate_run_id,
)

# The pin of the collection's requirements.txt, named in the error when matplotlib is missing.
MATPLOTLIB_REQUIREMENT = "matplotlib==3.11.2"

MODE_SPEC = dict(
    mode=dict(type="str", required=True),
    metrics=dict(type="path"),
    events=dict(type="path"),
    result=dict(type="path"),
    interrupted_at=dict(type="float"),
    last_step_before=dict(type="int"),
    checkpoint_verify=dict(type="dict"),
    pods=dict(type="dict"),
    timings=dict(type="dict"),
    error=dict(type="str"),
    notes=dict(type="str"),
    clock_offset_s=dict(type="float"),
    clock_offset_error_s=dict(type="float"),
)

ARGUMENT_SPEC = dict(
    evidence_dir=dict(type="path", required=True),
    run_id=dict(type="str", required=True),
    provenance=dict(type="path"),
    reference=dict(
        type="dict",
        required=True,
        options=dict(
            metrics=dict(type="path", required=True),
            result=dict(type="path", required=True),
            events=dict(type="path"),
        ),
    ),
    modes=dict(type="list", elements="dict", required=True, options=MODE_SPEC),
    phases=dict(type="dict", default={}),
    wall_s=dict(type="float"),
    fail_on_mismatch=dict(type="bool", default=True),
)


def judge(params):
    """(report, files): the report and the evidence files as (path, bytes), nothing written yet."""
    directory = params["evidence_dir"]
    report, series = build_report(
        run_id=params["run_id"],
        reference=params["reference"],
        modes=params["modes"],
        provenance=params["provenance"],
        phases=params["phases"],
        wall_s=params["wall_s"],
    )
    json_path = os.path.join(directory, REPORT_JSON_NAME)
    report = keep_volatile(report, json_path)
    files = [
        (json_path, report_json_bytes(report)),
        (os.path.join(directory, REPORT_MD_NAME), render_markdown(report).encode("utf-8")),
        (os.path.join(directory, LOSS_PNG_NAME), render_png(report, series)),
    ]
    return report, files


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    directory = params["evidence_dir"]
    paths = {
        "json": os.path.join(directory, REPORT_JSON_NAME),
        "md": os.path.join(directory, REPORT_MD_NAME),
        "png": os.path.join(directory, LOSS_PNG_NAME),
    }
    try:
        validate_run_id(params["run_id"])
        report, files = judge(params)
        changes = files_to_change(files)
        if changes and not module.check_mode:
            write_files(directory, changes, atomic_write)
    except (EvidenceError, ProvenanceError) as exc:
        module.fail_json(msg=str(exc), report=paths)
    except PlotLibraryMissing as exc:
        msg = missing_required_lib("matplotlib", reason="to draw loss.png")
        module.fail_json(msg="%s Install it with: pip install %s" % (msg, MATPLOTLIB_REQUIREMENT), error=str(exc))
    except (IOError, OSError) as exc:
        module.fail_json(msg="cannot write the evidence in %s: %s" % (directory, exc), report=paths)

    result = dict(
        changed=bool(changes),
        passed=report["passed"],
        failed_modes=report["failed_modes"],
        modes=report["modes"],
        report=paths,
    )
    if report["passed"]:
        result["msg"] = "resume drill passed in all %d modes" % len(report["modes"])
    else:
        result["msg"] = failure_message(report)
        if params["fail_on_mismatch"]:
            module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
