# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The drill's records as drill_evidence reads them (runs/<run_id>/drill/modes/*.json, drill/run.json): the
entries they give, the phases summed from them, and a bad record refused naming its file."""

from __future__ import annotations

import json

import pytest

from ansible_collections.trainops.gpu.plugins.module_utils import _drill_records as dr
from ansible_collections.trainops.gpu.plugins.module_utils._drill_judge import EvidenceError

RUN_ID = "r1"


def done(mode, **fields):
    """A done mode record as roles/resume_drill/tasks/mode.yml writes it."""
    record = {
        "mode": mode,
        "status": "done",
        "error": None,
        "run_id": f"{RUN_ID}-{mode}",
        "pulled": f"modes/{RUN_ID}-{mode}",
        "interrupted_at": 1800000100.25,
        "step_seen_at_interruption": 30,
        "last_step_before": 43,
        "checkpoint_verify": {"valid": True, "newest_valid_step": 40, "checkpoints": []},
        "pods": {"before": {"id": "p1", "port": 40001}, "after": {"id": "p1", "port": 40002}},
        "timings": {"interruption_s": 0.5, "pull_s": 2.25, "recovery_s": 1.5, "start_s": 4.0, "training_s": 16.5},
        "notes": "SIGKILL to the trainer process group",
        "clock": None,
    }
    record.update(fields)
    return record


def write(run_dir, name, record):
    path = run_dir / "drill" / "modes" / (name + ".json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(record if isinstance(record, str) else json.dumps(record, indent=4, sort_keys=True) + "\n")
    return str(path)


def test_record_paths_follow_the_drill_layout(tmp_path):
    assert dr.record_path("/runs/r1", "kill") == "/runs/r1/drill/modes/kill.json"
    assert dr.record_path("/runs/r1", "reference") == "/runs/r1/drill/modes/reference.json"
    assert dr.run_record_path("/runs/r1") == "/runs/r1/drill/run.json"


def test_a_missing_record_is_none_and_a_bad_one_names_its_file(tmp_path):
    assert dr.read_record(str(tmp_path / "absent.json")) is None
    path = write(tmp_path, "kill", '{"status": "done", ')
    with pytest.raises(EvidenceError, match=r"drill record .*/drill/modes/kill\.json is not JSON"):
        dr.read_record(path)
    path = write(tmp_path, "sigterm", "[1, 2]\n")
    with pytest.raises(EvidenceError, match=r"drill record .*/sigterm\.json does not hold a JSON object"):
        dr.read_record(path)
    path = write(tmp_path, "recreate", "")
    with pytest.raises(EvidenceError, match=r"recreate\.json is not JSON"):
        dr.read_record(path)


def test_a_done_record_gives_the_pulled_files_and_its_figures():
    entry = dr.mode_entry("/runs/r1", RUN_ID, "kill", done("kill"), "/p/kill.json")
    logs = "/runs/r1/modes/r1-kill/logs"
    assert entry == {
        "mode": "kill",
        "metrics": logs + "/metrics.jsonl",
        "events": logs + "/events.jsonl",
        "result": logs + "/result.json",
        "interrupted_at": 1800000100.25,
        "last_step_before": 43,
        "checkpoint_verify": {"valid": True, "newest_valid_step": 40, "checkpoints": []},
        "pods": {"before": {"id": "p1", "port": 40001}, "after": {"id": "p1", "port": 40002}},
        "timings": {"interruption_s": 0.5, "pull_s": 2.25, "recovery_s": 1.5, "start_s": 4.0, "training_s": 16.5},
        "venv": None,
        "error": None,
        "notes": "SIGKILL to the trainer process group",
    }
    # A measured clock goes in as the offset and its error; an integer time is a float like the module's option.
    entry = dr.mode_entry("/r", RUN_ID, "kill", done("kill", clock={"offset_s": -0.5, "error_s": 0.01}), "/p")
    assert entry["clock_offset_s"] == -0.5 and entry["clock_offset_error_s"] == 0.01
    entry = dr.mode_entry("/r", RUN_ID, "kill", done("kill", interrupted_at=1800000100), "/p")
    assert isinstance(entry["interrupted_at"], float)
    # No pulled in the record: the drill's default place for the trainer run <run_id>-<mode>.
    record = done("kill")
    del record["pulled"]
    assert dr.mode_entry("/r", RUN_ID, "kill", record, "/p")["metrics"] == "/r/modes/r1-kill/logs/metrics.jsonl"


def test_a_failed_or_missing_record_fails_the_mode_with_its_reason():
    failed = {"mode": "recreate", "status": "failed", "error": "wait for SSH: timed out", "pods": {"before": {}}}
    assert dr.mode_entry("/r", RUN_ID, "recreate", failed, "/p") == {
        "mode": "recreate",
        "error": "wait for SSH: timed out",
        "pods": {"before": {}},
    }
    assert dr.mode_entry("/r", RUN_ID, "no_gpu", None, "/p") == {"mode": "no_gpu", "error": dr.NOT_RUN}
    assert dr.mode_entry("/r", RUN_ID, "no_gpu", {}, "/p", stopped="bootstrap: failed")["error"] == (
        "not run: the drill stopped before this mode: bootstrap: failed"
    )
    entry = dr.mode_entry("/r", RUN_ID, "recreate", {"status": "failed"}, "/p/recreate.json")
    assert entry["error"] == "failed; its record /p/recreate.json names no error"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"interrupted_at": None}, "interrupted_at is None, the interruption's epoch seconds"),
        ({"interrupted_at": "soon"}, "interrupted_at is 'soon'"),
        ({"last_step_before": 4.5}, "last_step_before is 4.5, an integer step"),
        ({"last_step_before": True}, "last_step_before is True"),
        ({"checkpoint_verify": "ok"}, "checkpoint_verify is 'ok', an object or null"),
        ({"pulled": 7}, "pulled is 7, a path relative to /r"),
        ({"clock": {"offset_s": float("nan"), "error_s": 0.1}}, "clock.offset_s is nan, a finite number"),
    ],
)
def test_a_done_record_without_its_figures_is_refused_naming_the_file(fields, message):
    with pytest.raises(EvidenceError) as raised:
        dr.mode_entry("/r", RUN_ID, "kill", done("kill", **fields), "/r/drill/modes/kill.json")
    assert str(raised.value).startswith("drill record /r/drill/modes/kill.json: ") and message in str(raised.value)


def test_the_reference_entry_names_the_missing_record(tmp_path):
    run_dir = str(tmp_path)
    record = {"status": "done", "pulled": "modes/r1-reference", "timings": {"training_s": 4.0, "pull_s": 1.0}}
    entry = dr.reference_entry(run_dir, RUN_ID, record, "/rec")
    assert entry == {
        "metrics": run_dir + "/modes/r1-reference/logs/metrics.jsonl",
        "result": run_dir + "/modes/r1-reference/logs/result.json",
        "events": run_dir + "/modes/r1-reference/logs/events.jsonl",
        "venv": None,
    }
    # What the reference's bootstrap did with the requirements venv goes in as recorded; a venv that is not a
    # mapping is refused naming the record.
    built = {"state": "built", "seconds": 9.5, "key": "k1"}
    assert dr.reference_entry(run_dir, RUN_ID, dict(record, venv=built), "/rec")["venv"] == built
    with pytest.raises(EvidenceError, match=r"/rec.*venv"):
        dr.reference_entry(run_dir, RUN_ID, dict(record, venv="built"), "/rec")
    with pytest.raises(EvidenceError, match=r"no reference run recorded: /rec does not exist and .*metrics\.jsonl"):
        dr.reference_entry(run_dir, RUN_ID, None, "/rec")
    # The pulled journal in its default place still serves when the record is gone.
    metrics = tmp_path / "modes" / "r1-reference" / "logs" / "metrics.jsonl"
    metrics.parent.mkdir(parents=True)
    metrics.write_text("")
    assert dr.reference_entry(run_dir, RUN_ID, None, "/rec")["metrics"] == str(metrics)


def test_phases_sum_the_records_onto_the_controllers_own():
    reference = ("/ref.json", {"timings": {"training_s": 4.859, "pull_s": 1.705}})
    modes = [
        ("/kill.json", done("kill")),
        (
            "/sigterm.json",
            done("sigterm", timings={"interruption_s": 1, "pull_s": 0.5, "recovery_s": 2.0, "training_s": 10.25}),
        ),
        ("/recreate.json", {"status": "failed", "error": "x"}),  # no timings: adds nothing
        ("/no_gpu.json", None),  # not run
    ]
    controller = {"provisioning": 5.481, "bootstrap": 6.516, "sync": 1.5, "teardown": 1.989}
    phases = dr.sum_phases(controller, reference, modes)
    assert phases == {
        "provisioning": 5.481,
        "bootstrap": 6.516,
        "sync": round(1.5 + 1.705 + 2.25 + 0.5, 3),
        "teardown": 1.989,
        "training": round(4.859 + 16.5 + 10.25, 3),
        "interruption": 1.5,
        "recovery": 3.5,
    }
    assert controller["sync"] == 1.5  # the caller's dict is left as it was
    # Nothing recorded at all: zeros, and sync is the controller's alone.
    assert dr.sum_phases({}, ("/ref.json", None), []) == {
        "training": 0.0,
        "interruption": 0,
        "recovery": 0,
        "sync": 0.0,
    }


@pytest.mark.parametrize(
    ("timings", "message"),
    [
        ("fast", "timings is 'fast', an object of seconds is needed"),
        ({"interruption_s": 0.5, "pull_s": 1.0, "recovery_s": 1.0}, "timings.training_s is None, a finite number"),
        ({"interruption_s": 0.5, "pull_s": "1", "recovery_s": 1.0, "training_s": 1.0}, "timings.pull_s is '1'"),
        ({"interruption_s": float("inf"), "pull_s": 1, "recovery_s": 1, "training_s": 1}, "interruption_s is inf"),
    ],
)
def test_timings_that_are_not_seconds_are_refused_naming_the_file(timings, message):
    with pytest.raises(EvidenceError) as raised:
        dr.sum_phases({}, ("/ref.json", None), [("/d/kill.json", done("kill", timings=timings))])
    assert str(raised.value).startswith("drill record /d/kill.json: ") and message in str(raised.value)
    with pytest.raises(EvidenceError, match=r"drill record /ref\.json: timings\.pull_s is 'x'"):
        dr.sum_phases({}, ("/ref.json", {"timings": {"pull_s": "x"}}), [])
    with pytest.raises(EvidenceError, match=r"phases\.sync is 'x'"):
        dr.sum_phases({"sync": "x"}, ("/ref.json", None), [])


def records(tmp_path, run=None):
    write(
        tmp_path,
        "reference",
        {"status": "done", "pulled": "modes/r1-reference", "timings": {"training_s": 4.0, "pull_s": 1.0}},
    )
    write(tmp_path, "kill", done("kill"))
    if run is not None:
        (tmp_path / "drill" / "run.json").write_text(json.dumps(run))
    return dr.DrillRecords.read(str(tmp_path), RUN_ID, ["kill", "sigterm"])


def test_the_run_that_did_work_times_itself_and_records_run_json(tmp_path):
    drill = records(tmp_path, run={"phases": {"training": 1.0}, "wall_s": 9.0})
    assert [name for name, _path, _record in drill.modes] == ["kill", "sigterm"]
    assert drill.modes[1][2] is None  # sigterm has no record
    timing, data = drill.timing({"teardown": 2.0, "sync": 0.5}, 1000.0, True, 1186.5454)
    assert timing == {
        "phases": {"interruption": 0.5, "recovery": 1.5, "sync": 3.75, "teardown": 2.0, "training": 20.5},
        "wall_s": 186.545,
    }
    assert list(timing["phases"]) == sorted(timing["phases"])  # as recorded: report.md lists them so
    # Ansible's to_nice_json, as the drill's copy task wrote it.
    assert data == (json.dumps(timing, indent=4, sort_keys=True, separators=(",", ": ")) + "\n").encode()


def test_a_run_that_did_nothing_reports_what_run_json_recorded(tmp_path):
    recorded = {"phases": {"training": 1.0, "bootstrap": 2.0}, "wall_s": 9.0}
    drill = records(tmp_path, run=recorded)
    assert drill.timing({"teardown": 5.0}, 1000.0, False, 2000.0) == (recorded, None)
    # Nothing recorded yet: summed now and not recorded.
    drill = records(tmp_path / "fresh")
    timing, data = drill.timing({}, 1000.0, False, 1010.0)
    assert data is None and timing["wall_s"] == 10.0 and timing["phases"]["training"] == 20.5
    assert drill.timing({}, None, True, 1010.0)[0]["wall_s"] is None


def test_entries_of_the_whole_drill(tmp_path):
    drill = records(tmp_path)
    assert drill.reference_entry()["metrics"] == str(tmp_path) + "/modes/r1-reference/logs/metrics.jsonl"
    kill, sigterm = drill.mode_entries("pod lost")
    assert kill["mode"] == "kill" and kill["error"] is None
    assert sigterm == {"mode": "sigterm", "error": dr.NOT_RUN + ": pod lost"}
    write(tmp_path, "sigterm", "{")
    with pytest.raises(EvidenceError, match=r"drill/modes/sigterm\.json is not JSON"):
        dr.DrillRecords.read(str(tmp_path), RUN_ID, ["kill", "sigterm"])
