# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""drill_evidence and its module_utils on small synthetic journals written the trainer's way (one JSON object a
line, float.hex losses), plus the module's own run: files, check mode, second run, failure message."""

from __future__ import annotations

import json
import pathlib
import struct
import sys

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.trainops.gpu.plugins.module_utils import _drill_judge as de
from ansible_collections.trainops.gpu.plugins.module_utils import _drill_report as dr
from ansible_collections.trainops.gpu.plugins.modules import drill_evidence as module

STEPS = 200
T0 = 1_800_000_000.0  # the reference run's first step, epoch seconds
STEP_S = 0.01
INTERRUPTED_AT = T0 + 100.0
RESTART_S = 3.5  # interruption to the trainer's start
WEIGHTS = "a" * 64


def loss(step):
    return 2.0 / (1.0 + 0.01 * step) + (step % 7) * 1e-3


def lr(step):
    return 0.01 * min(1.0, step / 10.0)


def record(step, wall_time, loss_value=None):
    value = loss(step) if loss_value is None else loss_value
    return {
        "step": step,
        "loss": repr(value),
        "loss_hex": value.hex(),
        "lr": repr(lr(step)),
        "lr_hex": lr(step).hex(),
        "wall_time": wall_time,
        "elapsed_s": 0.0,
    }


def write_lines(path, records, tail=""):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records) + tail)
    return str(path)


def write_result(path, status="finished", weights=WEIGHTS, step=STEPS):
    path.parent.mkdir(parents=True, exist_ok=True)
    result = {"status": status, "exit_code": 0 if status == "finished" else 75, "step": step}
    if weights is not None:
        result["weights_sha256"] = weights
    path.write_text(json.dumps(result))
    return str(path)


@pytest.fixture
def reference(tmp_path):
    metrics = write_lines(tmp_path / "ref" / "metrics.jsonl", [record(s, T0 + s * STEP_S) for s in range(1, STEPS + 1)])
    return {"metrics": metrics, "result": write_result(tmp_path / "ref" / "result.json")}


def resumed_run(tmp_path, name="kill", resumed_from=100, last_step_before=130, steps=None, tamper=None, tail=""):
    """A drilled run's files: the first life's lines up to the step resumed from, then the new life's lines
    (the trainer drops the lines past the resume point), events with a start and a resume after the
    interruption (and an older resume before it), and the mode entry the module takes."""
    steps = list(range(1, STEPS + 1)) if steps is None else steps
    restart = INTERRUPTED_AT + RESTART_S
    records = []
    for step in steps:
        wall = T0 + step * STEP_S if step <= resumed_from else restart + 0.5 + (step - resumed_from) * STEP_S
        value = (tamper or {}).get(step)
        records.append(record(step, wall, value))
    base = tmp_path / name
    events = [
        {"event": "start", "time": T0 - 1.0, "pid": 10},
        {"event": "resume", "step": 40, "time": T0 - 0.5, "manifest_sha256": "0" * 64, "pid": 10},
        {"event": "save_end", "step": resumed_from, "time": T0 + 1.0, "pid": 10},
        {"event": "start", "time": restart, "pid": 11},
        {"event": "resume", "step": resumed_from, "time": restart + 0.25, "manifest_sha256": "b" * 64, "pid": 11},
        {"event": "exit", "status": "finished", "time": restart + 5.0, "pid": 11},
    ]
    return {
        "mode": name,
        "metrics": write_lines(base / "metrics.jsonl", records, tail),
        "events": write_lines(base / "events.jsonl", events),
        "result": write_result(base / "result.json"),
        "interrupted_at": INTERRUPTED_AT,
        "last_step_before": last_step_before,
        "checkpoint_verify": verify_result(resumed_from),
        "pods": {"before": {"id": "pod1", "port": 40001}, "after": {"id": "pod1", "port": 40002}},
        "timings": {"interruption": 0.1, "recovery": 4.0},
    }


def verify_result(step, valid=True, errors=None, manifest="b" * 64):
    """What checkpoint_verify returns for a root whose checkpoint at ``step`` is (or is not) valid."""
    entry = {"step": step, "valid": valid, "errors": errors or [], "manifest_sha256": manifest}
    return {
        "changed": False,
        "valid": valid,
        "newest_valid_step": step if valid else None,
        "checkpoints": [entry],
    }


def judge(reference, *modes):
    report, _series = de.build_report("r1", reference, list(modes))
    return report


def only(report):
    assert len(report["modes"]) == 1
    return report["modes"][0]


def test_equal_journals_pass_with_rto_and_rpo(tmp_path, reference):
    mode = only(judge(reference, resumed_run(tmp_path)))
    assert mode["status"] == de.PASS and mode["passed"] and mode["reasons"] == []
    assert mode["journal"]["equal"] and mode["journal"]["steps_compared"] == STEPS
    assert mode["weights"]["equal"] and mode["checkpoint"]["verified"]
    assert mode["resumed_from_step"] == 100
    assert mode["rpo_steps"] == 30  # 130 seen before the interruption, resumed from 100
    # First new step 101: restart + 0.5 + 1 step after the interruption.
    assert mode["first_new_step"]["step"] == 101
    assert mode["rto_s"] == pytest.approx(RESTART_S + 0.5 + STEP_S, abs=1e-3)
    assert mode["trainer_start_s"] == pytest.approx(RESTART_S, abs=1e-3)
    assert mode["resume_s"] == pytest.approx(RESTART_S + 0.25, abs=1e-3)
    assert mode["pods"]["port_changed"] and mode["pods"]["same_pod"]


def test_rto_subtracts_a_measured_clock_offset(tmp_path, reference):
    entry = resumed_run(tmp_path)
    # The pod's clock runs 2 s ahead: its stamps are 2 s late, so RTO is 2 s shorter than the raw difference.
    entry.update(clock_offset_s=2.0, clock_offset_error_s=0.05)
    mode = only(judge(reference, entry))
    assert mode["rto_s"] == pytest.approx(RESTART_S + 0.5 + STEP_S - 2.0, abs=1e-3)
    assert mode["clock"] == {"offset_s": 2.0, "error_s": 0.05, "source": "measured"}
    assert mode["rto_error_s"] == 0.05


def test_pod_clock_behind_hides_the_resume_until_the_offset_is_given(tmp_path, reference):
    entry = resumed_run(tmp_path)
    entry["interrupted_at"] = INTERRUPTED_AT + 10.0  # the pod's clock runs 10 s behind the controller's
    mode = only(judge(reference, entry))
    assert mode["status"] == de.FAIL and mode["resumed_from_step"] is None
    assert mode["reason"] == (
        "no resume after the interruption: events.jsonl has no resume event stamped after it (the last resume "
        "event (step 100) is stamped %.3f s before the interruption; if the pod's clock runs behind the "
        "controller's, give clock_offset_s)" % (10.0 - RESTART_S - 0.25)
    )
    entry["clock_offset_s"] = -10.0
    mode = only(judge(reference, entry))
    assert mode["status"] == de.PASS and mode["rto_s"] == pytest.approx(RESTART_S + 0.5 + STEP_S, abs=1e-3)


def test_one_tampered_loss_fails_naming_the_step_and_both_values(tmp_path, reference):
    bad = loss(137) + 2**-20
    mode = only(judge(reference, resumed_run(tmp_path, tamper={137: bad})))
    assert mode["status"] == de.FAIL and mode["first_differing_step"] == 137
    assert mode["reason"] == f"step 137: loss_hex differs (reference {loss(137).hex()}, resumed {bad.hex()})"
    assert mode["journal"]["differing_steps"] == 1


def test_two_spellings_of_one_float_are_equal_and_signed_zero_is_not(tmp_path, reference):
    assert de.float_bits("0x1.8p-1") == de.float_bits("0x1.8000000000000p-1") == de.float_bits(" 0x1.8p-1")
    assert de.float_bits("0x0.0p+0") != de.float_bits("-0x0.0p+0")
    assert de.float_bits("nonsense") is None and de.float_bits(None) is None
    assert de.float_bits("0x1.8p-1") == struct.unpack(">Q", struct.pack(">d", 0.75))[0]


def test_missing_steps_are_named_as_a_range(tmp_path, reference):
    mode = only(judge(reference, resumed_run(tmp_path, steps=list(range(1, 180)))))
    assert mode["status"] == de.FAIL and mode["first_differing_step"] == 180
    assert mode["reason"].startswith("steps 180-200 missing")
    assert mode["journal"]["missing"] == "180-200" and mode["journal"]["missing_count"] == 21


def test_extra_steps_are_named(tmp_path, reference):
    mode = only(judge(reference, resumed_run(tmp_path, steps=list(range(1, 211)))))
    assert mode["status"] == de.FAIL and mode["first_differing_step"] == 201
    assert mode["reason"].startswith("steps 201-210 not in the reference")
    assert mode["journal"]["extra_count"] == 10


def test_first_difference_leads_when_there_are_several(tmp_path, reference):
    steps = [s for s in range(1, STEPS + 1) if s != 150]
    mode = only(judge(reference, resumed_run(tmp_path, steps=steps, tamper={120: 9.0, 170: 9.0})))
    assert mode["first_differing_step"] == 120
    assert mode["reason"].startswith("step 120: loss_hex differs")
    assert "first of 3 differences: 2 steps differ, 1 missing, 0 not in the reference" in mode["reason"]


def test_torn_last_line_is_dropped_like_the_trainer_does(tmp_path, reference):
    torn = json.dumps(record(201, T0))[:40]  # a kill in the middle of the last write: no newline
    mode = only(judge(reference, resumed_run(tmp_path, tail=torn)))
    assert mode["status"] == de.PASS
    assert mode["journal"]["dropped_lines"] == 1 and mode["journal"]["steps"] == STEPS
    assert "1 torn or garbled journal line(s) dropped" in mode["notes"]


def test_torn_line_in_the_reference_is_dropped_too(tmp_path):
    path = tmp_path / "m.jsonl"
    write_lines(path, [record(1, T0), record(2, T0)], tail='{"step": 3, "loss_h')
    journal = de.read_journal(str(path))
    assert journal.steps == [1, 2] and journal.dropped_lines == 1


def test_duplicate_steps_in_the_resumed_journal_fail(tmp_path, reference):
    entry = resumed_run(tmp_path)
    with open(entry["metrics"], "a") as handle:
        handle.write(json.dumps(record(150, INTERRUPTED_AT + 1_000)) + "\n")  # a second line of the new life
    mode = only(judge(reference, entry))
    assert mode["status"] == de.FAIL and "step 150 recorded more than once" in mode["reason"]


def test_a_dead_lifes_lines_kept_past_the_resume_point_are_named_and_not_judged(tmp_path, reference):
    """A trainer that appends across lives: the killed life's steps 101-130 stay in the journal before the new
    life's. The new life's lines are judged (and time RTO); the note names the dead life's."""
    entry = resumed_run(tmp_path)
    lines = de.read_json_lines(entry["metrics"])[0]
    dead = [record(step, INTERRUPTED_AT - 1 + step / 1000, loss_value=7.0) for step in range(101, 131)]
    write_lines(
        tmp_path / "kill" / "metrics.jsonl",
        [r for r in lines if r["step"] <= 100] + dead + [r for r in lines if r["step"] > 100],
    )
    mode = only(judge(reference, entry))
    assert mode["status"] == de.PASS, mode["reason"]
    assert mode["first_new_step"]["wall_time"] > INTERRUPTED_AT and mode["rto_s"] > RESTART_S
    assert any("past the step resumed from (steps 101-130)" in note for note in mode["notes"]), mode["notes"]


def test_resumed_from_is_the_resume_event_after_the_interruption(tmp_path, reference):
    entry = resumed_run(tmp_path, resumed_from=120, last_step_before=160)
    mode = only(judge(reference, entry))
    # The events also hold an older resume (step 40, before the interruption): it is not the one.
    assert mode["resumed_from_step"] == 120 and mode["rpo_steps"] == 40
    assert mode["resume_event"]["manifest_sha256"] == "b" * 64
    assert mode["resumes_after_interruption"] == 1


def test_no_resume_after_the_interruption_fails(tmp_path, reference):
    entry = resumed_run(tmp_path)
    events = [e for e in de.read_events(entry["events"])[0] if not (e["event"] == "resume" and e["pid"] == 11)]
    write_lines(tmp_path / "kill" / "events.jsonl", events)
    mode = only(judge(reference, entry))
    assert mode["status"] == de.FAIL and mode["resumed_from_step"] is None
    assert mode["reason"].startswith(
        "no resume after the interruption: events.jsonl has no resume event stamped after it (the last resume "
        "event (step 40)"
    )
    assert mode["trainer_start_s"] == pytest.approx(RESTART_S, abs=1e-3)


def test_weights_mismatch_fails(tmp_path, reference):
    entry = resumed_run(tmp_path)
    write_result(tmp_path / "kill" / "result.json", weights="c" * 64)
    mode = only(judge(reference, entry))
    assert mode["status"] == de.FAIL and mode["journal"]["equal"]
    assert mode["reason"] == f"final weights differ (reference {'a' * 12}, resumed {'c' * 12})"


def test_weights_unknown_fails(tmp_path, reference):
    entry = resumed_run(tmp_path)
    write_result(tmp_path / "kill" / "result.json", weights=None)
    assert only(judge(reference, entry))["reason"] == "final weights unknown: result.json has no weights_sha256"


def test_unfinished_resumed_run_fails(tmp_path, reference):
    entry = resumed_run(tmp_path)
    write_result(tmp_path / "kill" / "result.json", status="interrupted")
    mode = only(judge(reference, entry))
    assert (
        mode["status"] == de.FAIL and "resumed run did not finish (status interrupted, exit code 75)" in mode["reason"]
    )


def test_unverified_checkpoint_fails_with_the_verifier_reason(tmp_path, reference):
    entry = resumed_run(tmp_path)
    entry["checkpoint_verify"] = verify_result(100, valid=False, errors=["model.pt: sha256 mismatch"])
    mode = only(judge(reference, entry))
    assert mode["status"] == de.FAIL and mode["checkpoint"]["verified"] is False
    assert mode["reason"] == "checkpoint used did not verify: step-00000100: model.pt: sha256 mismatch"


def test_checkpoint_without_verify_result_or_of_another_manifest_fails(tmp_path, reference):
    entry = resumed_run(tmp_path)
    entry["checkpoint_verify"] = None
    assert only(judge(reference, entry))["reason"].startswith("checkpoint used did not verify: no checkpoint_verify")
    entry["checkpoint_verify"] = verify_result(100, manifest="d" * 64)
    reason = only(judge(reference, entry))["reason"]
    assert reason.startswith("checkpoint used did not verify: the trainer resumed from manifest bbbbbbbbbbbb")
    entry["checkpoint_verify"] = verify_result(90)
    reason = only(judge(reference, entry))["reason"]
    assert reason == (
        "checkpoint used did not verify: checkpoint_verify did not vouch for step-00000100 (newest valid: 90)"
    )


def test_checkpoint_that_did_not_load_fails(tmp_path, reference):
    entry = resumed_run(tmp_path)
    entry["checkpoint_verify"]["checkpoints"][0]["loaded"] = {"ok": False, "error": "UnpicklingError: bad"}
    mode = only(judge(reference, entry))
    assert mode["reason"] == "checkpoint used did not verify: step-00000100 did not load: UnpicklingError: bad"


def test_orchestration_error_fails_even_without_files(tmp_path, reference):
    entry = {"mode": "recreate", "error": "pod did not come back within 300 s"}
    report = judge(reference, resumed_run(tmp_path), entry)
    failed = report["modes"][1]
    assert (
        failed["status"] == de.FAIL
        and failed["reasons"][0] == "orchestration failed: pod did not come back within 300 s"
    )
    assert report["failed_modes"] == ["recreate"] and not report["passed"]
    assert report["modes"][0]["status"] == de.PASS
    assert failed["reasons"] == ["orchestration failed: pod did not come back within 300 s"]
    assert failed["journal"]["equal"] is None and failed["first_differing_step"] is None
    assert failed["weights"]["equal"] is None and failed["checkpoint"]["verified"] is None
    assert de.failure_message(report) == (
        "resume drill failed in 1 of 2 modes: recreate: orchestration failed: pod did not come back within 300 s"
    )


def test_orchestration_error_still_judges_the_files_it_names(tmp_path, reference):
    entry = {"mode": "stop_start", "error": "pod came back late", "metrics": str(tmp_path / "absent.jsonl")}
    mode = only(judge(reference, entry))
    assert mode["reasons"] == [
        "orchestration failed: pod came back late",
        "resumed journal unreadable: cannot read %s: No such file or directory" % (tmp_path / "absent.jsonl"),
    ]


def test_orchestration_error_with_equal_files_still_fails(tmp_path, reference):
    entry = dict(resumed_run(tmp_path), error="teardown failed")
    mode = only(judge(reference, entry))
    assert mode["status"] == de.FAIL and mode["reasons"] == ["orchestration failed: teardown failed"]


@pytest.mark.parametrize(
    ("modes", "message"),
    [
        ([], "modes is empty"),
        ([{"mode": "kill", "error": "x"}, {"mode": "kill", "error": "y"}], "mode 'kill' is given twice"),
        ([{"mode": "kill", "metrics": "/m", "events": "/e", "result": "/r"}], "interrupted_at is required"),
        ([{"mode": "kill", "events": "/e", "result": "/r", "interrupted_at": 1.0}], "metrics is required"),
        (
            [{"mode": "kill", "error": "x", "interrupted_at": float("nan")}],
            r"modes\[0\] \(kill\)\.interrupted_at is nan",
        ),
        ([{"mode": "kill", "error": "x", "timings": {"recovery": float("inf")}}], r"timings\.recovery is inf"),
    ],
)
def test_bad_modes_are_refused(reference, modes, message):
    with pytest.raises(de.EvidenceError, match=message):
        de.build_report("r1", reference, modes)


def test_infinite_phase_is_refused(reference):
    with pytest.raises(de.EvidenceError, match=r"phases\.training is inf"):
        de.build_report("r1", reference, [{"mode": "kill", "error": "x"}], phases={"training": float("inf")})


def test_bad_reference_is_refused(tmp_path, reference):
    entry = {"mode": "kill", "error": "x"}
    with pytest.raises(de.EvidenceError, match="reference metrics: cannot read"):
        de.build_report("r1", dict(reference, metrics=str(tmp_path / "absent")), [entry])
    write_result(tmp_path / "ref" / "result.json", status="failed")
    with pytest.raises(de.EvidenceError, match="the reference run did not finish"):
        de.build_report("r1", reference, [entry])
    write_result(tmp_path / "ref" / "result.json", weights=None)
    with pytest.raises(de.EvidenceError, match="has no weights_sha256"):
        de.build_report("r1", reference, [entry])


def test_step_ranges():
    assert de.step_ranges([5, 1, 2, 3, 9, 10]) == "1-3, 5, 9-10"
    assert de.step_ranges([]) == ""


def test_markdown_table_has_one_row_per_mode_and_the_phases(tmp_path, reference):
    entry = {"mode": "recreate", "error": "no pod"}
    report, _series = de.build_report(
        "r1", reference, [resumed_run(tmp_path), entry], phases={"training": 3.25, "recovery": 9.0}, wall_s=42.0
    )
    text = dr.render_markdown(report)
    assert text.startswith("# Resume drill r1: FAIL\n")
    assert "| kill | **PASS** | 4.01 | 30 | 100 | yes | identical (200 steps) | identical |" in text
    assert "| recreate | **FAIL** | - | - | - | - | - | - | orchestration failed: no pod |" in text
    assert "| training | 3.2 |" in text and "| **wall time** | 42.0 |" in text
    assert "pod1:40001 | pod1:40002" in text


def test_provenance_summary_goes_into_the_report(tmp_path, reference):
    provenance = tmp_path / "provenance.json"
    provenance.write_text(
        json.dumps(
            {
                "source": {"commit": "abc123", "dirty": True, "archive": {"sha256": "f" * 64}},
                "command": {"shell": "python -m trainops_train.train --config c.json"},
                "config": {"sha256": "e" * 64, "trainer_config_hash": "sha256:" + "1" * 64},
            }
        )
    )
    report, _series = de.build_report("r1", reference, [resumed_run(tmp_path)], provenance=str(provenance))
    assert report["provenance"]["commit"] == "abc123" and report["provenance"]["dirty"] is True
    assert report["provenance"]["config_hash"] == "sha256:" + "1" * 64
    assert report["provenance"]["command"].startswith("python -m trainops_train.train")
    with pytest.raises(de.EvidenceError, match="provenance: cannot read"):
        de.build_report("r1", reference, [resumed_run(tmp_path)], provenance=str(tmp_path / "absent.json"))


CONFIG_HASH = "sha256:" + "c" * 64


def with_config_hash(entry, config_hash=CONFIG_HASH):
    """The mode entry with the trainer's config hash in every ``start`` event of its events.jsonl."""
    path = pathlib.Path(entry["events"])
    events = [json.loads(line) for line in path.read_text().splitlines()]
    for event in events:
        if event["event"] == "start":
            event["config_hash"] = config_hash
    write_lines(path, events)
    return entry


def drill_provenance(tmp_path):
    """provenance.json as the drill's sync push writes it: the command, and no config (config: null)."""
    path = tmp_path / "provenance.json"
    path.write_text(
        json.dumps(
            {
                "source": {"commit": "abc123", "dirty": False, "archive": None},
                "command": {"shell": "python -m trainops_train.train --config /w/train-config.json"},
                "config": None,
            }
        )
    )
    return str(path)


def test_every_evidence_file_names_the_config_hash_that_ran(tmp_path, reference):
    # The drill's provenance records no config (the trainer's config is written on the pod): the hash that
    # ran is the one the trainer wrote into each life's start event.
    write_lines(
        tmp_path / "ref" / "events.jsonl",
        [{"event": "start", "time": T0 - 1.0, "pid": 9, "config_hash": CONFIG_HASH}, {"event": "exit", "time": T0}],
    )
    reference = dict(reference, events=str(tmp_path / "ref" / "events.jsonl"))
    mode = with_config_hash(resumed_run(tmp_path))
    report, _series = de.build_report("r1", reference, [mode], provenance=drill_provenance(tmp_path))
    assert report["config_hash"] == CONFIG_HASH and report["reference"]["config_hash"] == CONFIG_HASH
    assert report["modes"][0]["config_hash"] == CONFIG_HASH and report["modes"][0]["notes"] == []
    assert report["provenance"]["config_hash"] is None  # as provenance.json has it
    text = dr.render_markdown(report)
    assert "None" not in text
    assert f"Reference: 200 steps (1 to 200), config hash `{CONFIG_HASH}`" in text
    assert f"config hash `{CONFIG_HASH}` (the trainer's; provenance.json records none)" in text
    assert CONFIG_HASH in dr.plot_title(report)


def test_a_config_hash_that_differs_is_noted(tmp_path, reference):
    provenance = tmp_path / "p.json"
    provenance.write_text(json.dumps({"config": {"trainer_config_hash": "sha256:" + "d" * 64}}))
    # No events for the reference: the provenance's hash is the best there is.
    report, _series = de.build_report("r1", reference, [resumed_run(tmp_path)], provenance=str(provenance))
    assert report["config_hash"] == "sha256:" + "d" * 64 and report["reference"]["config_hash"] is None
    write_lines(tmp_path / "ref" / "events.jsonl", [{"event": "start", "time": T0, "config_hash": CONFIG_HASH}])
    reference = dict(reference, events=str(tmp_path / "ref" / "events.jsonl"))
    other = "sha256:" + "e" * 64
    report, _series = de.build_report(
        "r1", reference, [with_config_hash(resumed_run(tmp_path), other)], provenance=str(provenance)
    )
    assert report["config_hash"] == CONFIG_HASH
    [mode] = report["modes"]
    assert mode["config_hash"] == other
    assert f"config hash {other} differs from the reference's {CONFIG_HASH}" in mode["notes"]
    text = dr.render_markdown(report)
    assert f"config hash `{CONFIG_HASH}` ran; provenance.json records `sha256:{'d' * 64}`" in text
    # Nothing known at all: said in words, never `None`.
    report, _series = de.build_report("r1", dict(reference, events=None), [resumed_run(tmp_path)])
    assert report["config_hash"] is None and "config hash unknown" in dr.render_markdown(report)


def test_the_requirements_venv_is_reported_with_each_bootstrap(tmp_path, reference):
    provenance = tmp_path / "p.json"
    venv = {"requirements": "requirements.txt", "key": "k1", "python": "/w/v/bin/python", "venv_dir": "/w/v"}
    provenance.write_text(json.dumps({"venv": dict(venv, freeze=["tinydep==1.0"])}))
    mode = dict(resumed_run(tmp_path), venv={"state": "reused", "seconds": 0.41, "key": "k1"})
    reference = dict(reference, venv={"state": "built", "seconds": 9.5, "key": "k1"})
    report, _series = de.build_report("r1", reference, [mode], provenance=str(provenance))
    assert report["venv"]["freeze"] == ["tinydep==1.0"] and report["modes"][0]["venv"]["state"] == "reused"
    assert [life["life"] for life in report["venv"]["lives"]] == ["reference", mode["mode"]]
    text = dr.render_markdown(report)
    assert (
        "Requirements: `requirements.txt` in venv `k1` (`/w/v/bin/python`), 1 package beyond the image's "
        f"(`tinydep==1.0`); bootstraps: reference built in 9.5 s; {mode['mode']} reused in 0.4 s." in text
    ), text
    # Without a venv nothing is said of one.
    report, _series = de.build_report("r1", dict(reference, venv=None), [resumed_run(tmp_path)])
    assert report["venv"] is None and "Requirements:" not in dr.render_markdown(report)


# ---------------------------------------------------------------------------------------------- the module


def run_module(capsys, args, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        module.main()
    return exited.value.code, json.loads(capsys.readouterr().out)


def module_args(tmp_path, reference, *modes):
    return {
        "evidence_dir": str(tmp_path / "evidence"),
        "run_id": "r1",
        "reference": reference,
        "modes": list(modes),
        "phases": {"training": 1.5},
        "wall_s": 10.0,
    }


def test_module_writes_evidence_once_and_check_mode_writes_nothing(tmp_path, reference, capsys):
    pytest.importorskip("matplotlib")
    args = module_args(tmp_path, reference, resumed_run(tmp_path))
    rc, predicted = run_module(capsys, args, check_mode=True)
    assert rc == 0 and predicted["changed"] is True and not (tmp_path / "evidence").exists()

    rc, result = run_module(capsys, args)
    assert rc == 0 and result["changed"] is True and result["passed"] is True, result
    report = json.loads((tmp_path / "evidence" / "report.json").read_text())
    assert report["modes"][0]["rto_s"] == result["modes"][0]["rto_s"]
    png = (tmp_path / "evidence" / "loss.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    assert (tmp_path / "evidence" / "report.md").read_text().startswith("# Resume drill r1: PASS")

    rc, again = run_module(capsys, args)
    assert rc == 0 and again["changed"] is False
    rc, predicted = run_module(capsys, args, check_mode=True)
    assert predicted["changed"] is False


def test_module_fails_naming_mode_and_step_after_writing_the_report(tmp_path, reference, capsys):
    pytest.importorskip("matplotlib")
    args = module_args(tmp_path, reference, resumed_run(tmp_path, tamper={137: 0.5}))
    rc, result = run_module(capsys, args)
    assert rc == 1 and result["failed"] and result["failed_modes"] == ["kill"]
    assert result["msg"].startswith("resume drill failed in 1 of 1 modes: kill: step 137: loss_hex differs")
    assert json.loads((tmp_path / "evidence" / "report.json").read_text())["passed"] is False
    rc, result = run_module(capsys, dict(args, fail_on_mismatch=False))
    assert rc == 0 and result["passed"] is False and result["changed"] is False


def test_module_bad_input_fails_before_writing(tmp_path, reference, capsys):
    args = module_args(tmp_path, reference, {"mode": "kill", "metrics": "/m"})
    rc, result = run_module(capsys, args)
    assert rc == 1 and "modes[0] (kill): events is required unless error is set" in result["msg"]
    rc, result = run_module(capsys, dict(module_args(tmp_path, reference, {"mode": "k", "error": "x"}), run_id="../x"))
    assert rc == 1 and "run_id '../x' must be" in result["msg"]
    assert not (tmp_path / "evidence").exists()


def test_module_without_matplotlib_names_the_package(tmp_path, reference, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    rc, result = run_module(capsys, module_args(tmp_path, reference, resumed_run(tmp_path)))
    assert rc == 1 and "Failed to import the required Python library (matplotlib)" in result["msg"]
    assert result["msg"].endswith("Install it with: pip install matplotlib==3.11.2")
    assert not (tmp_path / "evidence").exists()


def test_the_named_requirement_is_the_pinned_one():
    requirements = pathlib.Path(__file__).resolve().parents[4] / "requirements.txt"
    assert module.MATPLOTLIB_REQUIREMENT in requirements.read_text().splitlines()


# ------------------------------------------------------------------------------------ the drill's own records


def drill_run_dir(tmp_path):
    """runs/r1 as roles/resume_drill leaves it: the reference and the kill run pulled under modes/r1-<name>/logs,
    their records under drill/modes/, no record for sigterm (the drill stopped before it)."""
    run_dir = tmp_path / "runs" / "r1"
    ref_logs = run_dir / "modes" / "r1-reference" / "logs"
    write_lines(ref_logs / "metrics.jsonl", [record(s, T0 + s * STEP_S) for s in range(1, STEPS + 1)])
    write_result(ref_logs / "result.json")
    write_lines(ref_logs / "events.jsonl", [{"event": "start", "time": T0 - 1.0, "config_hash": CONFIG_HASH}])
    kill = with_config_hash(resumed_run(run_dir / "modes" / "r1-kill", name="logs"))
    records = run_dir / "drill" / "modes"
    records.mkdir(parents=True)
    reference_record = {
        "status": "done",
        "pulled": "modes/r1-reference",
        "timings": {"training_s": 4.5, "pull_s": 1.25},
    }
    (records / "reference.json").write_text(json.dumps(reference_record))
    kill_record = {
        "mode": "kill",
        "status": "done",
        "error": None,
        "pulled": "modes/r1-kill",
        "interrupted_at": kill["interrupted_at"],
        "last_step_before": kill["last_step_before"],
        "checkpoint_verify": kill["checkpoint_verify"],
        "pods": kill["pods"],
        "timings": {"interruption_s": 0.5, "pull_s": 2.0, "recovery_s": 3.25, "start_s": 1.0, "training_s": 10.0},
        "notes": "SIGKILL",
        "clock": {"offset_s": 0.25, "error_s": 0.01},
    }
    (records / "kill.json").write_text(json.dumps(kill_record, indent=4, sort_keys=True))
    return run_dir, kill, kill_record


def records_args(tmp_path, run_dir, **records):
    return {
        "evidence_dir": str(run_dir / "evidence"),
        "run_id": "r1",
        "records": dict({"run_dir": str(run_dir), "modes": ["kill", "sigterm"]}, **records),
        "fail_on_mismatch": False,
    }


def test_module_reads_the_drill_records_and_sums_the_phases(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    run_dir, kill, kill_record = drill_run_dir(tmp_path)
    controller = {"provisioning": 5.0, "bootstrap": 6.0, "sync": 1.5, "teardown": 2.0}
    args = records_args(tmp_path, run_dir, phases=controller, started_epoch=1000.0, did_work=True, stopped="lost")
    rc, result = run_module(capsys, args)
    assert rc == 0 and result["changed"] and result["failed_modes"] == ["sigterm"], result
    recorded = json.loads((run_dir / "drill" / "run.json").read_text())
    assert recorded["phases"] == {
        "bootstrap": 6.0,
        "interruption": 0.5,
        "provisioning": 5.0,
        "recovery": 3.25,
        "sync": 4.75,  # the controller's 1.5, the reference's pull 1.25 and kill's 2.0
        "teardown": 2.0,
        "training": 14.5,
    }
    report = json.loads((run_dir / "evidence" / "report.json").read_text())
    assert report["phases"] == recorded["phases"] and report["wall_s"] == recorded["wall_s"] > 0
    [judged_kill, sigterm] = report["modes"]
    assert judged_kill["status"] == "PASS" and judged_kill["clock"]["offset_s"] == 0.25
    assert sigterm["reason"] == "orchestration failed: not run: the drill stopped before this mode: lost"
    assert report["provenance"] is None  # runs/r1 holds no provenance.json

    # The same report as the one given the entries the drill's Jinja used to assemble.
    explicit = dict(
        kill,
        mode="kill",
        timings=kill_record["timings"],
        notes="SIGKILL",
        error=None,
        clock_offset_s=0.25,
        clock_offset_error_s=0.01,
    )
    ref_logs = run_dir / "modes" / "r1-reference" / "logs"
    given = {
        "evidence_dir": str(tmp_path / "given"),
        "run_id": "r1",
        "reference": {
            k: str(ref_logs / (k + n)) for k, n in (("metrics", ".jsonl"), ("result", ".json"), ("events", ".jsonl"))
        },
        "modes": [explicit, {"mode": "sigterm", "error": "not run: the drill stopped before this mode: lost"}],
        "phases": recorded["phases"],
        "wall_s": recorded["wall_s"],
        "fail_on_mismatch": False,
    }
    rc, _given_result = run_module(capsys, given)
    assert rc == 0
    for name in ("report.md", "loss.png"):
        assert (tmp_path / "given" / name).read_bytes() == (run_dir / "evidence" / name).read_bytes(), name
    again = json.loads((tmp_path / "given" / "report.json").read_text())
    assert dict(again, generated_at=None) == dict(report, generated_at=None)

    # A later run that did nothing reports what run.json recorded and changes nothing, check mode neither.
    later = records_args(tmp_path, run_dir, phases={}, started_epoch=5000.0, did_work=False, stopped="lost")
    rc, result = run_module(capsys, later)
    assert rc == 0 and result["changed"] is False, result
    rc, result = run_module(capsys, dict(later, records=dict(later["records"], did_work=True)), check_mode=True)
    assert rc == 0 and result["changed"] is True  # run.json would get the new wall time
    assert json.loads((run_dir / "drill" / "run.json").read_text()) == recorded


def test_module_names_a_bad_record_and_writes_no_evidence(tmp_path, capsys):
    run_dir, _kill, _record = drill_run_dir(tmp_path)
    (run_dir / "drill" / "modes" / "kill.json").write_text('{"status": "done", "interrupted_at": null}')
    rc, result = run_module(capsys, records_args(tmp_path, run_dir))
    path = run_dir / "drill" / "modes" / "kill.json"
    assert rc == 1 and result["msg"].startswith(f"drill record {path}: interrupted_at is None"), result
    (run_dir / "drill" / "modes" / "kill.json").write_text("{")
    rc, result = run_module(capsys, records_args(tmp_path, run_dir))
    assert rc == 1 and result["msg"].startswith(f"drill record {path} is not JSON"), result
    (run_dir / "drill" / "modes" / "reference.json").unlink()
    (run_dir / "modes" / "r1-reference" / "logs" / "metrics.jsonl").unlink()
    (run_dir / "drill" / "modes" / "kill.json").unlink()
    rc, result = run_module(capsys, records_args(tmp_path, run_dir))
    assert rc == 1 and result["msg"].startswith("no reference run recorded: " + str(run_dir)), result
    assert not (run_dir / "evidence").exists()
    rc, result = run_module(capsys, dict(records_args(tmp_path, run_dir), modes=[{"mode": "kill", "error": "x"}]))
    assert rc == 1 and "mutually exclusive: records|modes" in result["msg"], result
