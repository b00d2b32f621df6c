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
  - The inputs come either as O(reference) and O(modes), or from the drill's own records (O(records)), when
    the module reads C(drill/modes/reference.json) and C(drill/modes/<mode>.json) under O(records.run_dir),
    sums the phases and records them in C(drill/run.json).
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
      - Required with O(modes); mutually exclusive with O(records).
    type: dict
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
      venv:
        description:
          - What the bootstrap before it did with the requirements venv (C(bootstrap_result.venv)'s C(state),
            C(seconds), C(key)); reported in C(venv.lives) with what O(provenance) records of the venv.
        type: dict
  modes:
    description:
      - One entry per drilled mode, each a run interrupted once and resumed to the end.
      - One of O(modes) and O(records) is required.
    type: list
    elements: dict
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
      venv:
        description:
          - What the bootstrap after a pod-level interruption did with the requirements venv (C(state) built or
            reused, C(seconds), C(key)), for the report's C(venv.lives).
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
        recovery, teardown), for the report. With O(records) they are summed from the records instead.
    type: dict
  wall_s:
    description: The drill's wall time in seconds, for the report. With O(records) it is measured instead.
    type: float
  records:
    description:
      - Judge the drill that roles/resume_drill recorded under O(records.run_dir) (C(runs/<run_id>)). The
        reference's files are the pulled logs C(drill/modes/reference.json) names (C(pulled)), each mode's those
        of C(drill/modes/<mode>.json). A record with C(status) V(done) gives the mode's files, interruption
        time, last step before it, checkpoint_verify result, pods, timings, notes and clock offset; V(failed) its
        error; no record (or another status) makes the mode fail as not run.
      - A record that is not a JSON object, or a done record without a number where one is needed, fails the
        module naming the file.
      - O(provenance) defaults to C(provenance.json) in O(records.run_dir) when that file exists.
    type: dict
    suboptions:
      run_dir:
        description: The drill's run directory, C(<runs_dir>/<run_id>). Pulled paths in the records are relative to it.
        type: path
        required: true
      modes:
        description: The modes drilled, in the drill's order (the report's).
        type: list
        elements: str
        required: true
      stopped:
        description: Why the drill stopped, if it did; named in the reason of each mode without a record.
        type: str
      phases:
        description:
          - The phases the controller timed itself (provisioning, bootstrap, sync, teardown). Training is the
            reference's and every mode's C(timings.training_s) summed, interruption and recovery every mode's
            C(interruption_s) and C(recovery_s); every C(pull_s) is added to sync.
        type: dict
        default: {}
      started_epoch:
        description: When the drill started (epoch seconds); the wall time is measured from it.
        type: float
      did_work:
        description:
          - This run did work (ran the reference or a mode). Its phases and wall time are reported and recorded in
            C(drill/run.json). Otherwise the ones C(run.json) recorded are reported, so that a run that did
            nothing changes nothing.
        type: bool
        default: false
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

- name: Judge the drill from its own records (runs/<run_id>/drill/modes/*.json) and sum its phases
  trainops.gpu.drill_evidence:
    evidence_dir: "{{ runs_dir }}/{{ run_id }}/evidence"
    run_id: "{{ run_id }}"
    records:
      run_dir: "{{ runs_dir }}/{{ run_id }}"
      modes: [kill, sigterm, stop_start]
      phases: {provisioning: 12.0, bootstrap: 8.5, sync: 3.1}
      started_epoch: "{{ started_epoch }}"
      did_work: true
  delegate_to: localhost
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
import time

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.trainops.gpu.plugins.module_utils._drill_judge import (
    EvidenceError,
    build_report,
    failure_message,
)
from ansible_collections.trainops.gpu.plugins.module_utils._drill_records import DrillRecords, run_record_path
from ansible_collections.trainops.gpu.plugins.module_utils._drill_report import (
    LOSS_PNG_NAME,
    REPORT_JSON_NAME,
    REPORT_MD_NAME,
    PlotLibraryMissing,
    files_to_change,
    keep_volatile,
    render_markdown,
    render_png,
    report_json_bytes,
    write_files,
)
from ansible_collections.trainops.gpu.plugins.module_utils._files import atomic_write, validate_run_id

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
    venv=dict(type="dict"),
    error=dict(type="str"),
    notes=dict(type="str"),
    clock_offset_s=dict(type="float"),
    clock_offset_error_s=dict(type="float"),
)

RECORDS_SPEC = dict(
    run_dir=dict(type="path", required=True),
    modes=dict(type="list", elements="str", required=True),
    stopped=dict(type="str"),
    phases=dict(type="dict", default={}),
    started_epoch=dict(type="float"),
    did_work=dict(type="bool", default=False),
)

ARGUMENT_SPEC = dict(
    evidence_dir=dict(type="path", required=True),
    run_id=dict(type="str", required=True),
    provenance=dict(type="path"),
    reference=dict(
        type="dict",
        options=dict(
            metrics=dict(type="path", required=True),
            result=dict(type="path", required=True),
            events=dict(type="path"),
            venv=dict(type="dict"),
        ),
    ),
    modes=dict(type="list", elements="dict", options=MODE_SPEC),
    phases=dict(type="dict"),
    wall_s=dict(type="float"),
    records=dict(type="dict", options=RECORDS_SPEC),
    fail_on_mismatch=dict(type="bool", default=True),
)
MUTUALLY_EXCLUSIVE = [["records", "reference"], ["records", "modes"], ["records", "phases"], ["records", "wall_s"]]
REQUIRED_ONE_OF = [["records", "modes"]]
REQUIRED_TOGETHER = [["reference", "modes"]]


def inputs(params, now):
    """(build_report's keyword arguments, run.json as (path, bytes) or None): as given, or read from the
    drill's records with the phases summed."""
    records = params["records"]
    if not records:
        given = dict((key, params[key]) for key in ("reference", "modes", "provenance", "phases", "wall_s"))
        return given, None
    drill = DrillRecords.read(records["run_dir"], params["run_id"], records["modes"])
    timing, run_json = drill.timing(records["phases"], records["started_epoch"], records["did_work"], now)
    provenance = params["provenance"]
    if provenance is None and os.path.isfile(os.path.join(records["run_dir"], "provenance.json")):
        provenance = os.path.join(records["run_dir"], "provenance.json")
    wall_s = timing.get("wall_s")
    judged = dict(
        reference=drill.reference_entry(),
        modes=drill.mode_entries(records["stopped"]),
        provenance=provenance,
        phases=timing.get("phases") or {},
        wall_s=float(wall_s) if isinstance(wall_s, (int, float)) and not isinstance(wall_s, bool) else wall_s,
    )
    return judged, (run_record_path(records["run_dir"]), run_json) if run_json is not None else None


def judge(params, given):
    """(report, files): the report and the evidence files as (path, bytes), nothing written yet."""
    directory = params["evidence_dir"]
    report, series = build_report(run_id=params["run_id"], **given)
    json_path = os.path.join(directory, REPORT_JSON_NAME)
    report = keep_volatile(report, json_path)
    files = [
        (json_path, report_json_bytes(report)),
        (os.path.join(directory, REPORT_MD_NAME), render_markdown(report).encode("utf-8")),
        (os.path.join(directory, LOSS_PNG_NAME), render_png(report, series)),
    ]
    return report, files


def write_run_record(run_record, check_mode):
    """Record this run's phases and wall time in drill/run.json (before judging, as the drill always did:
    a later run that cannot redo the work reads them). True when the file changes."""
    changes = files_to_change([run_record])
    if changes and not check_mode:
        write_files(os.path.dirname(run_record[0]), changes, atomic_write)
    return bool(changes)


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        mutually_exclusive=MUTUALLY_EXCLUSIVE,
        required_one_of=REQUIRED_ONE_OF,
        required_together=REQUIRED_TOGETHER,
        supports_check_mode=True,
    )
    params = module.params
    directory = params["evidence_dir"]
    paths = {
        "json": os.path.join(directory, REPORT_JSON_NAME),
        "md": os.path.join(directory, REPORT_MD_NAME),
        "png": os.path.join(directory, LOSS_PNG_NAME),
    }
    run_changed = False
    try:
        validate_run_id(params["run_id"], EvidenceError)
        given, run_record = inputs(params, time.time())
        if run_record is not None:
            run_changed = write_run_record(run_record, module.check_mode)
        report, files = judge(params, given)
        changes = files_to_change(files)
        if changes and not module.check_mode:
            write_files(directory, changes, atomic_write)
    except EvidenceError as exc:
        module.fail_json(msg=str(exc), report=paths, changed=run_changed)
    except PlotLibraryMissing as exc:
        msg = missing_required_lib("matplotlib", reason="to draw loss.png")
        module.fail_json(
            msg="%s Install it with: pip install %s" % (msg, MATPLOTLIB_REQUIREMENT),
            error=str(exc),
            changed=run_changed,
        )
    except (IOError, OSError) as exc:
        module.fail_json(
            msg="cannot write the evidence in %s: %s" % (directory, exc), report=paths, changed=run_changed
        )

    result = dict(
        changed=bool(changes) or run_changed,
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
