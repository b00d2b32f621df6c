# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Runs on the controller through AnsiballZ (Python >= 3.8, standard library only, no matplotlib).
# ruff: noqa: UP004, UP009, UP031, RUF100
"""The resume drill's judgement: did a run that was interrupted and resumed compute exactly what an
uninterrupted reference run computed, how long did it take to recover (RTO) and how many steps were lost
(RPO)?

Functions on the files the drill pulled from the pods, used by the ``drill_evidence`` module. They read
those files and write nothing; rendering the report is ``_drill_report``'s, reading the drill's own records
``_drill_records``'s.

- ``read_journal(path)`` reads a metrics journal with the trainer's rules (``trainops_train.journal``):
  only complete lines (ending with a newline) that parse as JSON objects count; a torn last line, from a
  kill in the middle of a write, is dropped and counted.
- ``compare_journals(reference, resumed)`` compares ``loss_hex`` and ``lr_hex`` of every step, as the bits
  of the float each hex string spells, and names the first differing step, missing and extra steps.
- ``judge_mode(reference, mode)`` adds the resume point (the ``resume`` event in events.jsonl after the
  interruption), RPO, RTO, the checkpoint_verify result of the checkpoint resumed from, the outcome in
  result.json and the final weights hash, and decides PASS or FAIL with reasons a person reads.
- ``build_report(...)`` is the whole report (report.json) and the loss series the plot draws.

The config hash that ran is the one the trainer wrote into each life's ``start`` event (events.jsonl), the
reference's and each mode's; provenance.json has one only when the trainer's config was recorded with it
(the drill's sync push records none: the config is written on the pod). Every evidence file names it.
"""

from __future__ import annotations

import datetime
import json
import math
import posixpath
import struct

from ansible_collections.trainops.gpu.plugins.module_utils._checkpoint_format import step_dirname

FORMAT_VERSION = 1
PASS = "PASS"
FAIL = "FAIL"
COMPARED_FIELDS = ("loss_hex", "lr_hex")
FINISHED = "finished"
# Journal lines above this many differences are counted, not listed one by one.
MAX_LISTED_DIFFERENCES = 20
CLOCK_NOTE = (
    "interrupted_at is the controller's clock, journal wall_time and event times are the pod's; "
    "RTO is their difference after subtracting clock_offset_s (pod minus controller) when it was measured"
)


class EvidenceError(Exception):
    """Bad input: the module fails with this message before writing anything."""


# ---------------------------------------------------------------------------------------------- reading


class Journal(object):
    """A metrics journal as the trainer reads it: records by step, in file order."""

    def __init__(self, path):
        self.path = path
        self.exists = False
        self.records = {}  # step -> record (the first one)
        self.order = []  # steps in file order, each once
        self.lines = []  # every record with an integer step, in file order
        self.duplicates = []  # steps recorded more than once
        self.dropped_lines = 0  # torn or garbled lines (the trainer drops them too)
        self.stepless_lines = 0  # JSON objects without an integer step
        self.error = None  # why the file could not be read at all

    @property
    def steps(self):
        return sorted(self.records)

    @property
    def last_step(self):
        return max(self.records) if self.records else None


def read_json_lines(path):
    """(records, dropped): every complete line of a JSON-lines file that parses as an object, and how many
    lines were dropped (a torn last line without its newline, or a garbled line). The trainer's rule."""
    records = []
    dropped = 0
    with open(path, "rb") as handle:
        for raw in handle:
            if not raw.endswith(b"\n"):
                dropped += 1
                continue
            try:
                record = json.loads(raw.decode("utf-8", "replace"))
            except ValueError:
                dropped += 1
                continue
            if isinstance(record, dict):
                records.append(record)
            else:
                dropped += 1
    return records, dropped


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_journal(path):
    """The journal at ``path``; a missing or unreadable file gives a Journal with ``error`` set."""
    journal = Journal(path)
    if not path:
        journal.error = "no journal given"
        return journal
    try:
        records, journal.dropped_lines = read_json_lines(path)
    except (IOError, OSError) as exc:
        journal.error = "cannot read %s: %s" % (path, exc.strerror or exc)
        return journal
    journal.exists = True
    _add_lines(journal, records)
    return journal


def _add_lines(journal, records):
    for record in records:
        step = record.get("step")
        if not _is_int(step):
            journal.stepless_lines += 1
            continue
        journal.lines.append(record)
        if step in journal.records:
            if step not in journal.duplicates:
                journal.duplicates.append(step)
            continue
        journal.records[step] = record
        journal.order.append(step)


def drop_dead_lines(journal, resume_event):
    """(journal, dropped steps): the journal without the lines a life before the resume wrote past the
    step it resumed from (stamped before the resume event, on the pod's clock). A trainer that appends
    across lives keeps them; the new life's lines are the ones to judge (and to time RTO by)."""
    resumed_from, resumed_at = resume_event.get("step"), resume_event.get("time")
    if not _is_int(resumed_from) or not _is_number(resumed_at):
        return journal, []
    dead = [
        index
        for index, record in enumerate(journal.lines)
        if record["step"] > resumed_from and _is_number(record.get("wall_time")) and record["wall_time"] < resumed_at
    ]
    if not dead:
        return journal, []
    kept = Journal(journal.path)
    kept.exists, kept.dropped_lines, kept.error = journal.exists, journal.dropped_lines, journal.error
    doomed = set(dead)
    _add_lines(kept, [record for index, record in enumerate(journal.lines) if index not in doomed])
    kept.stepless_lines = journal.stepless_lines
    return kept, sorted(set(journal.lines[index]["step"] for index in dead))


def read_events(path):
    """(events, error): the event log's records (torn lines dropped), or an error text."""
    if not path:
        return [], "no events.jsonl given"
    try:
        return read_json_lines(path)[0], None
    except (IOError, OSError) as exc:
        return [], "cannot read %s: %s" % (path, exc.strerror or exc)


def config_hashes(events):
    """The distinct ``config_hash`` values of the ``start`` events (one per trainer life), in order."""
    hashes = []
    for event in events:
        value = event.get("config_hash") if event.get("event") == "start" else None
        if isinstance(value, str) and value and value not in hashes:
            hashes.append(value)
    return hashes


def read_json_file(path):
    """(object, error): a JSON file that must hold an object."""
    if not path:
        return None, "not given"
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read().decode("utf-8"))
    except (IOError, OSError) as exc:
        return None, "cannot read %s: %s" % (path, exc.strerror or exc)
    except ValueError as exc:
        return None, "%s is not JSON: %s" % (path, exc)
    if not isinstance(data, dict):
        return None, "%s does not hold a JSON object" % path
    return data, None


# -------------------------------------------------------------------------------------------- comparing


def float_bits(text):
    """The 64 bits of the float a ``float.hex`` string spells, or None when it spells none. Two spellings of
    one float (``0x1.8p-1``, ``0x1.8000000000000p-1``) are the same bits; -0.0 and 0.0 are not."""
    if not isinstance(text, str):
        return None
    try:
        value = float.fromhex(text.strip())
    except (ValueError, OverflowError):
        return None
    return struct.unpack(">Q", struct.pack(">d", value))[0]


def step_ranges(steps):
    """'180-200, 305': sorted steps written as ranges."""
    ranges = []
    for step in sorted(steps):
        if ranges and step == ranges[-1][1] + 1:
            ranges[-1][1] = step
        else:
            ranges.append([step, step])
    return ", ".join(("%d" % a) if a == b else ("%d-%d" % (a, b)) for a, b in ranges)


def _steps_phrase(steps, what):
    return "%s %s %s" % ("step" if len(steps) == 1 else "steps", step_ranges(steps), what)


def _field_difference(step, reference, resumed, field):
    """None when equal, else what differs about ``field`` at ``step``."""
    want, got = reference.get(field), resumed.get(field)
    want_bits, got_bits = float_bits(want), float_bits(got)
    if want_bits is None:
        return "%s unreadable in the reference (%r)" % (field, want)
    if got_bits is None:
        if field not in resumed:
            return "%s missing" % field
        return "%s unreadable (%r)" % (field, got)
    if want_bits != got_bits:
        return "%s differs (reference %s, resumed %s)" % (field, want, got)
    return None


def compare_journals(reference, resumed):
    """Compare two journals step by step. Returns a dict: equal, first_differing_step, issues (list of
    (step, text) sorted by step: the first is the first difference), differing_steps (count), missing and
    extra (step lists), steps_compared."""
    differing = []
    for step in reference.steps:
        got = resumed.records.get(step)
        if got is None:
            continue
        texts = [
            text for text in (_field_difference(step, reference.records[step], got, f) for f in COMPARED_FIELDS) if text
        ]
        if texts:
            differing.append((step, "step %d: %s" % (step, ", ".join(texts))))
    missing = [step for step in reference.steps if step not in resumed.records]
    extra = [step for step in resumed.steps if step not in reference.records]
    issues = list(differing)
    if missing:
        issues.append((missing[0], _steps_phrase(missing, "missing")))
    if extra:
        issues.append((extra[0], _steps_phrase(extra, "not in the reference")))
    for step in resumed.duplicates:
        issues.append((step, "step %d recorded more than once" % step))
    issues.sort(key=lambda issue: issue[0])
    return {
        "equal": not issues,
        "first_differing_step": issues[0][0] if issues else None,
        "issues": issues,
        "differing_steps": len(differing),
        "missing": missing,
        "extra": extra,
        "steps_compared": len([s for s in reference.steps if s in resumed.records]),
    }


# ------------------------------------------------------------------------------------ resume, RTO, RPO


def _event_time(event, offset):
    """An event's (or journal record's) time on the controller's clock, or None."""
    value = event.get("time", event.get("wall_time"))
    return value - offset if _is_number(value) else None


def events_after(events, name, interrupted_at, offset):
    """The events called ``name`` stamped at or after the interruption (pod clock minus offset)."""
    found = []
    for event in events:
        if event.get("event") != name:
            continue
        when = _event_time(event, offset)
        if when is not None and when >= interrupted_at:
            found.append(event)
    return found


def find_resume(events, interrupted_at, offset):
    """(resume event or None, how many resume events follow the interruption, how it was found)."""
    after = events_after(events, "resume", interrupted_at, offset)
    if after:
        return after[0], len(after), "first resume event after the interruption"
    return None, 0, "no resume event after the interruption"


def first_new_step(journal, resumed_from):
    """The journal's first record past the step resumed from. The trainer drops every line after that step
    when it resumes, so whatever the journal holds past it was computed after the resume."""
    later = [step for step in journal.order if step > resumed_from]
    return journal.records[min(later)] if later else None


def _round(value, digits=3):
    return None if value is None else round(value, digits)


def _utc(epoch):
    if not _is_number(epoch):
        return None
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).isoformat()


def recovery_figures(journal, events, interrupted_at, last_step_before, offset):
    """The resume point, RPO, RTO and the times of the recovery's stages, relative to the interruption."""
    figures = {
        "resumed_from_step": None,
        "resume_event": None,
        "resumes_after_interruption": 0,
        "rpo_steps": None,
        "rto_s": None,
        "trainer_start_s": None,
        "resume_s": None,
        "first_new_step": None,
        "notes": [],
        "no_resume_hint": None,
    }
    starts = events_after(events, "start", interrupted_at, offset)
    if starts:
        figures["trainer_start_s"] = _round(_event_time(starts[0], offset) - interrupted_at)
    event, count, how = find_resume(events, interrupted_at, offset)
    figures["resumes_after_interruption"] = count
    if event is None:
        earlier = [e for e in events if e.get("event") == "resume" and _event_time(e, offset) is not None]
        if earlier:
            figures["no_resume_hint"] = (
                "the last resume event (step %s) is stamped %.3f s before the interruption; if the pod's clock "
                "runs behind the controller's, give clock_offset_s"
                % (earlier[-1].get("step"), interrupted_at - _event_time(earlier[-1], offset))
            )
        return figures
    if not _is_int(event.get("step")):
        figures["notes"].append("the resume event after the interruption has no integer step")
        return figures
    resumed_from = event["step"]
    figures["resumed_from_step"] = resumed_from
    figures["resume_event"] = {
        "step": resumed_from,
        "path": event.get("path"),
        "manifest_sha256": event.get("manifest_sha256"),
        "time": event.get("time"),
        "found": how,
    }
    figures["resume_s"] = _round(_event_time(event, offset) - interrupted_at)
    if count > 1:
        figures["notes"].append("%d resume events after the interruption: the first is used" % count)
    if _is_int(last_step_before):
        figures["rpo_steps"] = last_step_before - resumed_from
        if last_step_before < resumed_from:
            figures["notes"].append(
                "last_step_before (%d) is below the step resumed from (%d): the journal was read before the "
                "trainer's last steps" % (last_step_before, resumed_from)
            )
    record = first_new_step(journal, resumed_from)
    if record is not None:
        when = _event_time(record, offset)
        figures["first_new_step"] = {"step": record["step"], "wall_time": record.get("wall_time")}
        if when is None:
            figures["notes"].append("step %d has no wall_time: RTO unknown" % record["step"])
        elif when < interrupted_at:
            figures["notes"].append(
                "step %d is stamped %.3f s before the interruption: the pod's clock runs behind the "
                "controller's; RTO unknown (give clock_offset_s)" % (record["step"], interrupted_at - when)
            )
        else:
            figures["rto_s"] = _round(when - interrupted_at)
    return figures


UNSEALED_HINT = (
    "seal each checkpoint once it is written: trainops_train.hooks (Run.checkpoint() or seal()), see "
    "docs/trainer_contract.md"
)


def unsealed(errors):
    """Whether checkpoint_verify's errors say the checkpoint was never sealed (or its seal never finished)."""
    return any("not sealed" in str(error) or "torn seal" in str(error) for error in errors or [])


def verify_entry(verify, step, name):
    """checkpoint_verify's entry for the checkpoint resumed from: by its step, else (a checkpoint whose seal
    is missing has no step) by its name."""
    listed = verify.get("checkpoints") if isinstance(verify, dict) else None
    entries = [c for c in listed or [] if isinstance(c, dict)]
    for entry in entries:
        if step is not None and entry.get("step") == step:
            return entry
    for entry in entries:
        path = entry.get("path")
        if name and isinstance(path, str) and posixpath.basename(path.rstrip("/")) == name:
            return entry
    return None


def checkpoint_verdict(verify, step, manifest_sha256, name=None):
    """(verified: bool, detail): whether the checkpoint_verify result ``verify`` vouches for the checkpoint
    at ``step`` that the trainer resumed from (and for the same manifest, when both name one). ``name`` is
    the checkpoint's (the resume event's path, last component), step_dirname(step) when not given."""
    if step is None:
        return False, "no checkpoint was resumed from"
    name = name or step_dirname(step)
    if not isinstance(verify, dict) or not verify:
        return False, "checkpoint used did not verify: no checkpoint_verify result for %s" % name
    entry = verify_entry(verify, step, name)
    if entry is not None:
        if not entry.get("valid"):
            errors = entry.get("errors") or ["invalid"]
            if unsealed(errors):
                return False, "checkpoint used is not sealed: %s: %s; %s" % (
                    name,
                    "; ".join(str(e) for e in errors),
                    UNSEALED_HINT,
                )
            return False, "checkpoint used did not verify: %s: %s" % (name, "; ".join(str(e) for e in errors))
        verified_sha = entry.get("manifest_sha256")
        if manifest_sha256 and verified_sha and verified_sha != manifest_sha256:
            return False, (
                "checkpoint used did not verify: the trainer resumed from manifest %s, checkpoint_verify "
                "verified %s of %s" % (manifest_sha256[:12], verified_sha[:12], name)
            )
        loaded = entry.get("loaded")
        if isinstance(loaded, dict) and loaded.get("ok") is False:
            return False, "checkpoint used did not verify: %s did not load: %s" % (name, loaded.get("error"))
        how = "every file's sha256 checked" + (", loaded" if isinstance(loaded, dict) and loaded.get("ok") else "")
        return True, "%s verified (%s)" % (name, how)
    if verify.get("failed"):
        return False, "checkpoint used did not verify: %s" % (verify.get("msg") or "checkpoint_verify failed")
    if verify.get("valid") and verify.get("newest_valid_step") == step:
        return True, "%s verified (newest valid checkpoint)" % name
    return False, "checkpoint used did not verify: checkpoint_verify did not vouch for %s (newest valid: %s)" % (
        name,
        verify.get("newest_valid_step"),
    )


# -------------------------------------------------------------------------------------------- judging


def _short(digest):
    return digest[:12] if isinstance(digest, str) else repr(digest)


class Reference(object):
    """The uninterrupted run every mode is compared with."""

    def __init__(self, metrics, result, events=None):
        self.metrics_path = metrics
        self.result_path = result
        self.events_path = events
        self.journal = read_journal(metrics)
        if self.journal.error:
            raise EvidenceError("reference metrics: %s" % self.journal.error)
        if not self.journal.records:
            raise EvidenceError("reference metrics %s holds no step" % metrics)
        if self.journal.duplicates:
            raise EvidenceError(
                "reference metrics %s records %s more than once" % (metrics, step_ranges(self.journal.duplicates))
            )
        self.result, error = read_json_file(result)
        if error:
            raise EvidenceError("reference result: %s" % error)
        if self.result.get("status") != FINISHED:
            raise EvidenceError(
                "the reference run did not finish (result.json status %r, exit code %r)"
                % (self.result.get("status"), self.result.get("exit_code"))
            )
        self.weights_sha256 = self.result.get("weights_sha256")
        if not isinstance(self.weights_sha256, str) or not self.weights_sha256:
            raise EvidenceError("reference result %s has no weights_sha256" % result)
        # The config it ran: its start events say (optional; without them the provenance's is used).
        self.config_hashes = []
        if events:
            records, error = read_events(events)
            if error:
                raise EvidenceError("reference events: %s" % error)
            self.config_hashes = config_hashes(records)
        if not self.config_hashes and isinstance(self.result.get("config_hash"), str) and self.result["config_hash"]:
            self.config_hashes = [self.result["config_hash"]]
        self.config_hash = self.config_hashes[-1] if self.config_hashes else None

    def summary(self):
        return {
            "metrics": self.metrics_path,
            "result": self.result_path,
            "steps": len(self.journal.records),
            "first_step": self.journal.steps[0],
            "last_step": self.journal.last_step,
            "dropped_lines": self.journal.dropped_lines,
            "weights_sha256": self.weights_sha256,
            "status": self.result.get("status"),
            "events": self.events_path,
            "config_hash": self.config_hash,
        }


def _journal_summary(journal, comparison):
    missing, extra = comparison["missing"], comparison["extra"]
    return {
        "path": journal.path,
        "equal": comparison["equal"],
        "steps": len(journal.records),
        "steps_compared": comparison["steps_compared"],
        "first_differing_step": comparison["first_differing_step"],
        "differing_steps": comparison["differing_steps"],
        "missing": step_ranges(missing),
        "missing_count": len(missing),
        "extra": step_ranges(extra),
        "extra_count": len(extra),
        "duplicates": step_ranges(journal.duplicates),
        "dropped_lines": journal.dropped_lines,
        "stepless_lines": journal.stepless_lines,
        "differences": [text for _step, text in comparison["issues"][:MAX_LISTED_DIFFERENCES]],
    }


def _journal_reason(comparison):
    issues = comparison["issues"]
    first = issues[0][1]
    if len(issues) > 1:
        first += " (first of %d differences: %d steps differ, %d missing, %d not in the reference)" % (
            len(issues),
            comparison["differing_steps"],
            len(comparison["missing"]),
            len(comparison["extra"]),
        )
    return first


def _clock(mode):
    offset = mode.get("clock_offset_s")
    error = mode.get("clock_offset_error_s")
    if _is_number(offset):
        return {"offset_s": offset, "error_s": error if _is_number(error) else None, "source": "measured"}
    return {"offset_s": 0.0, "error_s": None, "source": "not measured"}


def _pods(pods):
    pods = pods if isinstance(pods, dict) else {}
    shown = {}
    for side in ("before", "after"):
        pod = pods.get(side) if isinstance(pods.get(side), dict) else {}
        shown[side] = {"id": pod.get("id"), "port": pod.get("port")}
    shown["same_pod"] = bool(shown["before"]["id"]) and shown["before"]["id"] == shown["after"]["id"]
    shown["port_changed"] = shown["before"]["port"] != shown["after"]["port"]
    return shown


def _outcome(result_path):
    result, error = read_json_file(result_path)
    if error:
        return None, {"status": None, "exit_code": None, "step": None, "weights_sha256": None, "error": error}
    return result, {
        "status": result.get("status"),
        "exit_code": result.get("exit_code"),
        "step": result.get("step"),
        "weights_sha256": result.get("weights_sha256"),
        "error": None,
    }


def _sealed_state(verify, step, name):
    """False when checkpoint_verify found the checkpoint resumed from unsealed, True when it verified, else
    None (not verified for another reason, or not known)."""
    entry = verify_entry(verify, step, name)
    if entry is None or step is None:
        return None
    if entry.get("valid"):
        return True
    return False if unsealed(entry.get("errors")) else None


def judge_mode(reference, mode):
    """(entry, journal): one drill mode's figures and verdict. ``mode`` is the module's mode entry (see the
    module's options). Reasons come in this order: the orchestration's error, the journal, the final
    weights, the checkpoint resumed from, the run's outcome."""
    clock = _clock(mode)
    interrupted_at = mode.get("interrupted_at")
    journal = read_journal(mode.get("metrics"))
    events, events_error = read_events(mode.get("events"))
    result, outcome = _outcome(mode.get("result"))
    notes = []

    if _is_number(interrupted_at):
        resume_event = find_resume(events, interrupted_at, clock["offset_s"])[0]
        journal, dead = drop_dead_lines(journal, resume_event or {})
        if dead:
            notes.append(
                "the journal keeps lines its life before the interruption wrote past the step resumed from "
                "(%s): judged on the new life's lines; a trainer drops them when it resumes (hooks.Run.resume "
                "does)" % _steps_phrase(dead, "").strip()
            )
        figures = recovery_figures(journal, events, interrupted_at, mode.get("last_step_before"), clock["offset_s"])
    else:
        figures = recovery_figures(journal, [], 0.0, None, 0.0)
        notes.append("no interruption time given")
    notes.extend(figures.pop("notes"))
    no_resume_hint = figures.pop("no_resume_hint")
    if journal.dropped_lines:
        notes.append("%d torn or garbled journal line(s) dropped" % journal.dropped_lines)
    ran = config_hashes(events)
    config_hash = ran[-1] if ran else None
    if len(ran) > 1:
        notes.append("its lives ran %d config hashes: %s" % (len(ran), ", ".join(ran)))
    if config_hash and reference.config_hash and config_hash != reference.config_hash:
        notes.append("config hash %s differs from the reference's %s" % (config_hash, reference.config_hash))

    error = mode.get("error")
    # A mode whose orchestration failed may lack some files: only those given are judged.
    judged = dict((key, mode.get(key) is not None or not error) for key in ("metrics", "events", "result"))
    reasons = ["orchestration failed: %s" % error] if error else []
    comparison = compare_journals(reference.journal, Journal(None) if journal.error else journal)
    if journal.error:
        comparison = dict(comparison, equal=None, first_differing_step=None, issues=[], missing=[], extra=[])
        if judged["metrics"]:
            reasons.append("resumed journal unreadable: %s" % journal.error)
    elif not comparison["equal"]:
        reasons.append(_journal_reason(comparison))

    weights = outcome["weights_sha256"]
    weights_equal = (weights == reference.weights_sha256) if weights else None
    if result is not None and not weights:
        reasons.append("final weights unknown: result.json has no weights_sha256")
    elif result is not None and not weights_equal:
        reasons.append(
            "final weights differ (reference %s, resumed %s)" % (_short(reference.weights_sha256), _short(weights))
        )

    resumed_from = figures["resumed_from_step"]
    manifest = (figures["resume_event"] or {}).get("manifest_sha256")
    resumed_path = (figures["resume_event"] or {}).get("path")
    checkpoint_name = posixpath.basename(resumed_path.rstrip("/")) if isinstance(resumed_path, str) else None
    verified, verify_detail = checkpoint_verdict(
        mode.get("checkpoint_verify"), resumed_from, manifest, checkpoint_name or None
    )
    if resumed_from is None:
        verified = None
    if events_error:
        if judged["events"]:
            reasons.append("resume point unknown: events.jsonl %s" % events_error)
    elif resumed_from is None and _is_number(interrupted_at):
        reason = "no resume after the interruption: events.jsonl has no resume event stamped after it"
        reasons.append(reason + (" (%s)" % no_resume_hint if no_resume_hint else ""))
    elif not verified and resumed_from is not None:
        reasons.append(verify_detail)

    if outcome["error"]:
        if judged["result"]:
            reasons.append("resumed run's outcome unknown: result.json %s" % outcome["error"])
    elif outcome["status"] != FINISHED:
        reasons.append(
            "resumed run did not finish (status %s, exit code %s)" % (outcome["status"], outcome["exit_code"])
        )

    passed = not reasons
    entry = {
        "mode": mode["mode"],
        "status": PASS if passed else FAIL,
        "passed": passed,
        "reason": "; ".join(reasons) if reasons else "journal and final weights identical to the reference",
        "reasons": reasons,
        "first_differing_step": comparison["first_differing_step"],
        "config_hash": config_hash,
        "interrupted_at": interrupted_at,
        "interrupted_at_utc": _utc(interrupted_at),
        "last_step_before": mode.get("last_step_before"),
        "clock": clock,
        "rto_error_s": clock["error_s"],
        "checkpoint": {
            "verified": verified,
            "step": resumed_from,
            "name": (checkpoint_name or step_dirname(resumed_from)) if resumed_from is not None else None,
            "sealed": _sealed_state(mode.get("checkpoint_verify"), resumed_from, checkpoint_name),
            "detail": verify_detail,
        },
        "journal": _journal_summary(journal, comparison),
        "weights": {"equal": weights_equal, "reference": reference.weights_sha256, "resumed": weights},
        "result": outcome,
        "pods": _pods(mode.get("pods")),
        "timings": dict(mode.get("timings") or {}),
        "venv": venv_life(mode.get("venv")),
        "error": mode.get("error"),
        "notes": ([mode["notes"]] if mode.get("notes") else []) + notes,
        "files": {"metrics": mode.get("metrics"), "events": mode.get("events"), "result": mode.get("result")},
    }
    entry.update(figures)
    return entry, journal


def venv_life(venv):
    """What one bootstrap did with the requirements venv (``state``: built or reused, ``seconds``), or None."""
    if not isinstance(venv, dict):
        return None
    return {"state": venv.get("state"), "seconds": venv.get("seconds"), "key": venv.get("key")}


def venv_summary(provenance, reference_venv, modes):
    """report.json's ``venv``: the requirements venv the run recorded (provenance.json's: the file's name, key,
    interpreter, ``pip freeze``) with ``lives``, what each bootstrap did with it (the reference's, then each
    mode's that bootstrapped again); None when the run had none."""
    recorded = (provenance or {}).get("venv")
    lives = [dict(venv_life(reference_venv), life="reference")] if venv_life(reference_venv) else []
    lives += [dict(m["venv"], life=m["mode"]) for m in modes if m.get("venv")]
    if not recorded and not lives:
        return None
    summary = dict(recorded or {})
    summary["lives"] = lives
    return summary


def _provenance_summary(path):
    if not path:
        return None
    record, error = read_json_file(path)
    if error:
        raise EvidenceError("provenance: %s" % error)
    source = record.get("source") if isinstance(record.get("source"), dict) else {}
    command = record.get("command") if isinstance(record.get("command"), dict) else {}
    config = record.get("config") if isinstance(record.get("config"), dict) else {}
    archive = source.get("archive") if isinstance(source.get("archive"), dict) else {}
    return {
        "path": path,
        "commit": source.get("commit"),
        "dirty": source.get("dirty"),
        "archive_sha256": archive.get("sha256"),
        "command": command.get("given") or command.get("shell"),  # a string command ran as given (sh -c)
        "config_sha256": config.get("sha256"),
        "config_hash": config.get("trainer_config_hash"),
        "recorded_at": record.get("recorded_at"),
        "venv": record.get("venv") if isinstance(record.get("venv"), dict) else None,
    }


def check_finite(where, value):
    """Refuse NaN and infinities anywhere in ``value``: no figure can be computed from them, and report.json
    is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        raise EvidenceError("%s is %r: a finite number is needed" % (where, value))
    if isinstance(value, dict):
        for key, item in value.items():
            check_finite("%s.%s" % (where, key), item)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            check_finite("%s[%d]" % (where, index), item)


def check_modes(modes):
    """Refuse what cannot be judged at all: no modes, a duplicate name, a mode without its files or its
    interruption time (unless it records the orchestration's error), a number that is not finite."""
    if not modes:
        raise EvidenceError("modes is empty: nothing to judge")
    seen = set()
    for index, mode in enumerate(modes):
        name = mode.get("mode")
        if not name:
            raise EvidenceError("modes[%d] has no mode name" % index)
        if name in seen:
            raise EvidenceError("modes[%d]: mode %r is given twice" % (index, name))
        seen.add(name)
        for key in ("interrupted_at", "clock_offset_s", "clock_offset_error_s", "pods", "timings", "venv"):
            check_finite("modes[%d] (%s).%s" % (index, name, key), mode.get(key))
        if mode.get("error"):
            continue
        for key in ("metrics", "events", "result", "interrupted_at"):
            if mode.get(key) is None:
                raise EvidenceError("modes[%d] (%s): %s is required unless error is set" % (index, name, key))


def build_report(run_id, reference, modes, provenance=None, phases=None, wall_s=None, now=None):
    """(report, series): the whole report.json document and the loss series for the plot."""
    check_modes(modes)
    check_finite("phases", phases)
    check_finite("wall_s", wall_s)
    check_finite("reference.venv", reference.get("venv"))
    reference_venv = reference.get("venv")
    reference = Reference(reference["metrics"], reference["result"], reference.get("events"))
    summary = _provenance_summary(provenance)
    judged = []
    series = {"reference": loss_series(reference.journal), "modes": {}}
    for mode in modes:
        entry, journal = judge_mode(reference, mode)
        judged.append(entry)
        series["modes"][entry["mode"]] = loss_series(journal)
    failed = [entry["mode"] for entry in judged if not entry["passed"]]
    report = {
        "format_version": FORMAT_VERSION,
        "run_id": run_id,
        "generated_at": (now or datetime.datetime.now(datetime.timezone.utc)).isoformat(),
        "passed": not failed,
        "failed_modes": failed,
        "reference": reference.summary(),
        # The config hash that ran: the reference trainer's own, else the one provenance.json recorded.
        "config_hash": reference.config_hash or (summary or {}).get("config_hash"),
        "modes": judged,
        "phases": dict(phases or {}),
        "wall_s": wall_s,
        "provenance": summary,
        "venv": venv_summary(summary, reference_venv, judged),
        "clock_note": CLOCK_NOTE,
    }
    return report, series


def failure_message(report):
    """One line naming each failed mode and its first reason (which names its first differing step)."""
    failed = [m for m in report["modes"] if not m["passed"]]
    parts = ["%s: %s" % (m["mode"], m["reason"]) for m in failed]
    return "resume drill failed in %d of %d modes: %s" % (len(failed), len(report["modes"]), "; ".join(parts))


def _loss_value(record):
    bits_text = record.get("loss_hex")
    if isinstance(bits_text, str):
        try:
            return float.fromhex(bits_text)
        except (ValueError, OverflowError):
            pass
    try:
        return float(record.get("loss"))
    except (TypeError, ValueError):
        return None


def loss_series(journal):
    points = []
    for step in journal.steps:
        value = _loss_value(journal.records[step])
        if value is not None and math.isfinite(value):
            points.append((step, value))
    return points
