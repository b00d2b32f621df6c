# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Runs on the controller through AnsiballZ (Python >= 3.8, standard library only).
# ruff: noqa: UP004, UP009, UP031, RUF100
"""The resume drill's own records, read for its evidence.

While it runs, the drill (roles/resume_drill) records under ``runs/<run_id>/drill/``: ``modes/reference.json``
(reference_finish.yml: where the reference run was pulled, its timings), ``modes/<mode>.json`` per mode
(mode.yml: ``status`` done with the interruption time, the last step before it, the checkpoint_verify
result, the pods and the timings; or failed with the error) and ``run.json`` (the phases and wall time of
the run that did the work, written by drill_evidence). This module turns them into drill_evidence's
reference and mode entries and sums the phases; the drill passes nothing it recorded through Jinja.

- ``read_record(path)``: the record, None when there is none, EvidenceError naming the file when it is not
  a JSON object.
- ``reference_entry``, ``mode_entry``: the build_report inputs of one record (pure).
- ``sum_phases(controller, reference, modes)``: the drill's phases (pure): the controller's own (provisioning,
  bootstrap, sync, teardown) plus training, interruption and recovery summed over the records, and the
  pulls added to sync.
- ``DrillRecords.read(run_dir, run_id, modes)``: every record of one drill; ``timing(...)`` the phases and
  wall time to report, and the bytes of run.json when this run did work.
"""

from __future__ import annotations

import json
import math
import os

from ansible_collections.trainops.gpu.plugins.module_utils._drill_judge import EvidenceError
from ansible_collections.trainops.gpu.plugins.module_utils._run_layout import (
    EVENTS_NAME,
    LOGS_DIRNAME,
    METRICS_NAME,
    RESULT_NAME,
)

DRILL_DIRNAME = "drill"
MODE_RECORDS_DIRNAME = "modes"
REFERENCE_RECORD = "reference"
RUN_RECORD_NAME = "run.json"
DONE = "done"
FAILED = "failed"
NOT_RUN = "not run: the drill stopped before this mode"
# Where the drill pulls a trainer run <run_id>-<name> when its record names no other place (run_dir relative).
DEFAULT_PULLED = "modes/%s-%s"


def record_path(run_dir, name):
    # type: (str, str) -> str
    """``runs/<run_id>/drill/modes/<name>.json``: the record of a mode, or of the reference run."""
    return os.path.join(run_dir, DRILL_DIRNAME, MODE_RECORDS_DIRNAME, name + ".json")


def run_record_path(run_dir):
    # type: (str) -> str
    """``runs/<run_id>/drill/run.json``: the phases and wall time of the run that did the work."""
    return os.path.join(run_dir, DRILL_DIRNAME, RUN_RECORD_NAME)


def read_record(path):
    # type: (str) -> dict | None
    """The JSON object at ``path``; None when there is no such file (that step did not run)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return None
    except (IOError, OSError) as exc:
        raise EvidenceError("drill record %s cannot be read: %s" % (path, exc.strerror or exc)) from exc
    try:
        record = json.loads(data.decode("utf-8"))
    except ValueError as exc:
        raise EvidenceError("drill record %s is not JSON: %s" % (path, exc)) from exc
    if not isinstance(record, dict):
        raise EvidenceError("drill record %s does not hold a JSON object" % path)
    return record


def _bad(path, what, value, need):
    return EvidenceError("drill record %s: %s is %r, %s is needed" % (path, what, value, need))


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _number(path, what, value):
    if not _is_number(value):
        raise _bad(path, what, value, "a finite number")
    return float(value)


def _dict_or_none(path, record, key):
    value = record.get(key)
    if value is not None and not isinstance(value, dict):
        raise _bad(path, key, value, "an object or null")
    return value


def pulled_logs(run_dir, run_id, name, record, path):
    # type: (str, str, str, dict | None, str) -> dict
    """The pulled metrics, events and result of the trainer run a record names (``pulled``, relative to
    ``run_dir``; ``modes/<run_id>-<name>`` when it names none)."""
    pulled = (record or {}).get("pulled")
    if pulled is None:
        pulled = DEFAULT_PULLED % (run_id, name)
    elif not isinstance(pulled, str) or not pulled:
        raise _bad(path, "pulled", pulled, "a path relative to %s" % run_dir)
    logs = "%s/%s/%s" % (run_dir, pulled, LOGS_DIRNAME)
    return {
        "metrics": "%s/%s" % (logs, METRICS_NAME),
        "result": "%s/%s" % (logs, RESULT_NAME),
        "events": "%s/%s" % (logs, EVENTS_NAME),
    }


def reference_entry(run_dir, run_id, record, path):
    # type: (str, str, dict | None, str) -> dict
    """build_report's ``reference``: the pulled files of the reference run. Without a record the default
    place is read, and when that holds no journal either the error names the record that is missing."""
    files = pulled_logs(run_dir, run_id, REFERENCE_RECORD, record, path)
    if record is None and not os.path.isfile(files["metrics"]):
        raise EvidenceError(
            "no reference run recorded: %s does not exist and %s is not a file" % (path, files["metrics"])
        )
    if record is not None:
        files["venv"] = _dict_or_none(path, record, "venv")
    return files


def mode_entry(run_dir, run_id, name, record, path, stopped=None):
    # type: (str, str, str, dict | None, str, str | None) -> dict
    """build_report's entry of one mode from its record: a done mode's files and figures, a failed mode's
    error, or "not run" (no record, or one that says neither) with why the drill stopped."""
    status = (record or {}).get("status")
    if status == DONE:
        interrupted_at = record.get("interrupted_at")
        if not _is_number(interrupted_at):
            raise _bad(path, "interrupted_at", interrupted_at, "the interruption's epoch seconds")
        last_step = record.get("last_step_before")
        if isinstance(last_step, bool) or not isinstance(last_step, int):
            raise _bad(path, "last_step_before", last_step, "an integer step")
        entry = dict(
            pulled_logs(run_dir, run_id, name, record, path),
            mode=name,
            interrupted_at=float(interrupted_at),
            last_step_before=last_step,
            checkpoint_verify=_dict_or_none(path, record, "checkpoint_verify"),
            pods=_dict_or_none(path, record, "pods"),
            timings=_dict_or_none(path, record, "timings"),
            venv=_dict_or_none(path, record, "venv"),
            error=None,
            notes=record.get("notes", ""),
        )
        clock = _dict_or_none(path, record, "clock")
        if clock:
            entry["clock_offset_s"] = _number(path, "clock.offset_s", clock.get("offset_s"))
            error = clock.get("error_s")
            entry["clock_offset_error_s"] = None if error is None else _number(path, "clock.error_s", error)
        return entry
    if status == FAILED:
        error = record.get("error")
        if not isinstance(error, str) or not error.strip():
            error = "failed; its record %s names no error" % path
        return {"mode": name, "error": error, "pods": _dict_or_none(path, record, "pods")}
    return {"mode": name, "error": NOT_RUN + ((": " + stopped) if stopped else "")}


def sum_phases(controller, reference, modes):
    # type: (dict | None, tuple, list) -> dict
    """The drill's phases: ``controller`` (the phases the controller timed itself) with training (the
    reference's and every mode's), interruption and recovery summed over the records, and every pull added
    to sync. ``reference`` is (path, record or None), ``modes`` a list of them; a record without timings
    (failed, not run) adds nothing, one whose timings are not numbers is refused naming the file."""
    timed = []
    for path, record in modes:
        if record and "timings" in record:
            if not isinstance(record["timings"], dict):
                raise _bad(path, "timings", record["timings"], "an object of seconds")
            timed.append((path, record["timings"]))

    def total(key):
        return sum(_number(path, "timings." + key, timings.get(key)) for path, timings in timed)

    ref_path, ref_record = reference
    ref_timings = (ref_record or {}).get("timings")
    ref_timings = ref_timings if isinstance(ref_timings, dict) else {}

    def of_reference(key):
        return _number(ref_path, "timings." + key, ref_timings[key]) if key in ref_timings else 0.0

    phases = dict(controller or {})
    sync = phases.get("sync", 0)
    if not _is_number(sync):
        raise EvidenceError("phases.sync is %r: a finite number of seconds is needed" % (sync,))
    phases.update(
        training=round(of_reference("training_s") + total("training_s"), 3),
        interruption=round(total("interruption_s"), 3),
        recovery=round(total("recovery_s"), 3),
        sync=round(float(sync) + of_reference("pull_s") + total("pull_s"), 3),
    )
    return phases


def run_record_bytes(timing):
    # type: (dict) -> bytes
    """run.json as the drill always wrote it (Ansible's to_nice_json and a newline)."""
    return (json.dumps(timing, indent=4, sort_keys=True, separators=(",", ": ")) + "\n").encode("utf-8")


class DrillRecords(object):
    """Every record of one drill: the reference's, each mode's (in the drill's order) and run.json."""

    def __init__(self, run_dir, run_id, reference, modes, run):
        self.run_dir = run_dir
        self.run_id = run_id
        self.reference = reference  # (path, record or None)
        self.modes = modes  # [(name, path, record or None)]
        self.run = run  # (path, record or None)

    @classmethod
    def read(cls, run_dir, run_id, modes):
        # type: (str, str, list) -> DrillRecords
        reference_path = record_path(run_dir, REFERENCE_RECORD)
        run_path = run_record_path(run_dir)
        return cls(
            run_dir,
            run_id,
            (reference_path, read_record(reference_path)),
            [(name, record_path(run_dir, name), read_record(record_path(run_dir, name))) for name in modes],
            (run_path, read_record(run_path)),
        )

    def reference_entry(self):
        return reference_entry(self.run_dir, self.run_id, self.reference[1], self.reference[0])

    def mode_entries(self, stopped=None):
        return [mode_entry(self.run_dir, self.run_id, n, r, p, stopped) for n, p, r in self.modes]

    def timing(self, controller_phases, started_epoch, did_work, now):
        # type: (dict | None, float | None, bool, float) -> tuple
        """(timing, run.json bytes or None): ``{phases, wall_s}`` to report. A run that did work sums its
        phases and times itself from ``started_epoch``, and records them (the bytes, to be written); a run
        that did nothing reports what run.json recorded, so that it changes nothing."""
        recorded = self.run[1]
        if recorded and not did_work:
            return recorded, None
        timing = {
            "wall_s": None if started_epoch is None else round(now - started_epoch, 3),
            "phases": sum_phases(controller_phases, self.reference, [(p, r) for _n, p, r in self.modes]),
        }
        if not did_work:
            return timing, None
        data = run_record_bytes(timing)
        # As recorded (keys in file order): a later run that reads run.json reports the very same.
        return json.loads(data.decode("utf-8")), data
