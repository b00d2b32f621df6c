"""playbooks/resume_drill.yml end to end on the emulator's podman backend (real pods, SSH, torch).

One emulator serves the module. The drill of all six modes runs once with resume_drill_keep (module fixture);
a second run with the same run id must report no change; a third with resume_drill_keep false only tears down.
The tamper test judges a copy of the pulled evidence again (--tags evidence: no API call that changes
anything). The SIGINT test interrupts ansible-playbook once the pod exists, checks that every pod and
volume the API has for that run is in its state.json, and tears them down with --tags teardown.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from drill_harness import ROOT, Drill, changed_tasks, commit_tree, explain, recap
from runpod_emulator.testing import EmulatorProcess, default_signals, kill_sshd

pytestmark = [pytest.mark.podman, pytest.mark.slow]

MODES = ["kill", "sigterm", "stop_start", "recreate", "host_failure", "no_gpu"]
RUN_ID = "e2e"


def state_of(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "state.json").read_text())


@pytest.fixture(scope="module")
def drill(tmp_path_factory: pytest.TempPathFactory, pod_image: str):
    tmp = tmp_path_factory.mktemp("drill")
    (tmp / "key").mkdir()
    # A source tree of its own (the trainer only), committed: the repository's tree may change while the test
    # runs, and a changed source is rightly pushed and recorded again by a second run.
    src = tmp / "src"
    shutil.copytree(
        ROOT / "training", src / "training", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "tests")
    )
    commit_tree(src)
    with EmulatorProcess(
        backend="podman", state_dir=tmp / "emulator", extra_args=["--container-prefix", "rpdrill"]
    ) as emulator:
        yield Drill(emulator, tmp)


@pytest.fixture(scope="module")
def full_drill(drill: Drill):
    """The six modes, pods and volume kept; (the run, its wall seconds)."""
    started = time.monotonic()
    done = drill.run({"resume_drill_run_id": RUN_ID, "resume_drill_keep": True})
    return done, time.monotonic() - started


def test_every_mode_recovers_bit_identical(drill: Drill, full_drill):
    done, wall_s = full_drill
    assert done.returncode == 0, explain(done)
    run_dir = drill.runs / RUN_ID
    evidence = run_dir / "evidence"
    report = json.loads((evidence / "report.json").read_text())
    markdown = (evidence / "report.md").read_text()
    assert markdown.startswith(f"# Resume drill {RUN_ID}: PASS")
    # The config hash that ran (the reference trainer's start event) is named in report.json and report.md.
    events = Path(report["reference"]["metrics"]).with_name("events.jsonl").read_text().splitlines()
    ran = {json.loads(line).get("config_hash") for line in events if json.loads(line).get("event") == "start"}
    assert len(ran) == 1 and None not in ran, ran
    [config_hash] = ran
    assert report["config_hash"] == report["reference"]["config_hash"] == config_hash, report["reference"]
    assert all(mode["config_hash"] == config_hash for mode in report["modes"]), report["modes"]
    assert f"config hash `{config_hash}`" in markdown and "`None`" not in markdown, markdown
    assert (evidence / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    modes = {m["mode"]: m for m in report["modes"]}
    assert list(modes) == MODES, report["modes"]
    for name, mode in modes.items():
        assert mode["status"] == "PASS", (name, mode)
        assert isinstance(mode["rto_s"], (int, float)) and mode["rto_s"] > 0, (name, mode)
        assert isinstance(mode["rpo_steps"], int) and mode["rpo_steps"] >= 0, (name, mode)
    text = json.dumps(report)
    assert "journal" in text and "weights" in text
    # Kept (resume_drill_keep): the verdict names what still bills, per hour.
    verdict = " ".join(done.stdout.split())
    assert "Kept (resume_drill_keep), still billing: pod " in verdict and " USD/h." in verdict, explain(done)
    # Pod-level modes came back on another endpoint; recreate and no_gpu on another pod.
    assert modes["stop_start"]["pods"]["before"]["port"] != modes["stop_start"]["pods"]["after"]["port"]
    for name in ("recreate", "no_gpu"):
        assert modes[name]["pods"]["before"]["id"] != modes[name]["pods"]["after"]["id"], modes[name]
    assert modes["kill"]["pods"]["before"] == modes["kill"]["pods"]["after"]
    # The phases the drill recorded add up to no more than its wall time.
    phases = report.get("phases") or {}
    assert {"provisioning", "bootstrap", "sync", "training", "interruption", "recovery"} <= set(phases), phases
    print(
        f"\ndrill wall time {wall_s:.1f} s; "
        + ", ".join(f"{m}: RTO {modes[m]['rto_s']:.1f} s RPO {modes[m]['rpo_steps']}" for m in MODES)
    )


def test_second_run_with_keep_changes_nothing(drill: Drill, full_drill):
    done, _wall_s = full_drill
    assert done.returncode == 0, explain(done)
    before = drill.mutating_requests()
    again = drill.run({"resume_drill_run_id": RUN_ID, "resume_drill_keep": True}, timeout=300)
    assert again.returncode == 0, explain(again)
    counters = recap(again)
    assert counters and all(c["changed"] == 0 for c in counters.values()), (counters, changed_tasks(again))
    assert drill.mutating_requests() == before, "a second run with nothing to do changed something through the API"
    assert len([p for p in drill.pods_of(RUN_ID) if p["status"] == "RUNNING"]) == 1


def test_tampered_journal_fails_naming_mode_and_step(drill: Drill, full_drill):
    done, _wall_s = full_drill
    assert done.returncode == 0, explain(done)
    copy_runs = drill.tmp / "tampered-runs"
    shutil.copytree(drill.runs / RUN_ID, copy_runs / RUN_ID, ignore=shutil.ignore_patterns("*.lock"))
    metrics = copy_runs / RUN_ID / "modes" / f"{RUN_ID}-sigterm" / "logs" / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if json.loads(line)["step"] == 200)
    record = json.loads(lines[index])
    mantissa, exponent = record["loss_hex"].split("p")
    record["loss_hex"] = mantissa[:-1] + ("1" if mantissa[-1] != "1" else "2") + "p" + exponent
    lines[index] = json.dumps(record)
    metrics.write_text("\n".join(lines) + "\n")
    before = drill.mutating_requests()
    judged = drill.run(
        {"resume_drill_run_id": RUN_ID, "resume_drill_runs_dir": str(copy_runs)}, "--tags", "evidence", timeout=180
    )
    assert judged.returncode != 0, explain(judged)
    assert re.search(r"sigterm[^\n]*\b200\b", judged.stdout), explain(judged)
    report = json.loads((copy_runs / RUN_ID / "evidence" / "report.json").read_text())
    statuses = {m["mode"]: m["status"] for m in report["modes"]}
    assert statuses["sigterm"] == "FAIL" and all(s == "PASS" for m, s in statuses.items() if m != "sigterm"), statuses
    assert drill.mutating_requests() == before, "judging the evidence again called the API"


def test_teardown_leaves_nothing_billing_and_records_final_states(drill: Drill, full_drill):
    done, _wall_s = full_drill
    assert done.returncode == 0, explain(done)
    torn = drill.run({"resume_drill_run_id": RUN_ID, "resume_drill_keep": False}, timeout=300)
    assert torn.returncode == 0, explain(torn)
    assert drill.pods_of(RUN_ID) == [] or all(p["status"] == "TERMINATED" for p in drill.pods_of(RUN_ID))
    state = state_of(drill.runs / RUN_ID)
    pods = [r for r in state["resources"] if r["kind"] == "pod"]
    volumes = [r for r in state["resources"] if r["kind"] == "network_volume"]
    # The first pod, recreate's and no_gpu's replacement.
    assert len(pods) == 3 and len(volumes) == 1, state["resources"]
    for resource in pods:
        assert resource["final"]["status"] == "TERMINATED" and resource["final"]["source"] == "api", resource
        status, _body = drill.api(f"/v2/pods/{resource['id']}")
        assert status == 404, resource
    assert volumes[0]["final"]["status"] == "DELETED", volumes[0]
    status, _body = drill.api(f"/v2/network-volumes/{volumes[0]['id']}")
    assert status == 404


def test_bad_input_fails_before_anything_is_created(drill: Drill):
    before = drill.mutating_requests()
    done = drill.run({"resume_drill_run_id": "bad", "resume_drill_modes": ["kill", "meteor"]}, timeout=120)
    assert done.returncode != 0
    assert "unknown mode(s)" in done.stdout and "meteor" in done.stdout, explain(done)
    # The string form (make drill MODES=kill,meteor): split on commas, judged the same.
    done = drill.run({"resume_drill_run_id": "bad", "resume_drill_modes": "kill, meteor,kill"}, timeout=120)
    assert done.returncode != 0
    text = " ".join(done.stdout.split())
    assert 'unknown mode(s) ["meteor"]' in text and "resume_drill_modes lists a mode twice." in text, explain(done)
    done = drill.run({"resume_drill_run_id": "../escape"}, timeout=120)
    assert done.returncode != 0 and "resume_drill_run_id" in done.stdout, explain(done)
    # Outside the emulator RunPod cannot fail a host: listing host_failure without its command is bad input...
    done = drill.run({"resume_drill_run_id": "bad", "resume_drill_emulator": False,
                      "resume_drill_modes": ["kill", "host_failure"]}, timeout=120)  # fmt: skip
    assert done.returncode != 0, explain(done)
    assert "host_failure needs resume_drill_host_failure_command outside the emulator" in done.stdout, explain(done)
    # ...and auto drills the four modes the API can cause (check mode stops after the plan, naming them).
    done = drill.run({"resume_drill_run_id": "bad", "resume_drill_emulator": False}, "--check", timeout=120)
    assert "drill kill, sigterm, stop_start, recreate, and" in " ".join(done.stdout.split()), explain(done)
    assert drill.mutating_requests() == before
    assert not (drill.runs / "bad").exists()


def test_sigint_leaves_every_pod_and_volume_recorded(drill: Drill):
    run_id = "sigint"
    run_dir = drill.runs / run_id
    proc = subprocess.Popen(
        drill.command({"resume_drill_run_id": run_id, "resume_drill_modes": ["kill"]}),
        cwd=ROOT,
        env=drill.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=default_signals,  # Ctrl-C interrupts it even when this test run inherited SIGINT ignored
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if drill.pods_of(run_id):
                break
            time.sleep(0.05)
        assert drill.pods_of(run_id), "no pod was created within 120 s"
        # Ctrl-C: the terminal sends SIGINT to the whole foreground process group.
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=120)
        state = state_of(run_dir)
        recorded = {(r["kind"], r["id"]) for r in state["resources"]}
        for pod in drill.pods_of(run_id):
            assert ("pod", pod["id"]) in recorded, (pod, state)
        volumes = drill.volumes_of(run_id)
        assert volumes, "the volume is created before the pod"
        for volume in volumes:
            assert ("network_volume", volume["id"]) in recorded, (volume, state)
        # What the interrupted drill recorded is enough to tear it all down.
        torn = drill.run({"resume_drill_run_id": run_id}, "--tags", "teardown", timeout=180)
        assert torn.returncode == 0, explain(torn)
        assert all(p["status"] == "TERMINATED" for p in drill.pods_of(run_id)) and drill.volumes_of(run_id) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        for pod in drill.pods_of(run_id):
            drill.emulator.api("DELETE", f"/v2/pods/{pod['id']}")
        for volume in drill.volumes_of(run_id):
            drill.emulator.api("DELETE", f"/v2/network-volumes/{volume['id']}")


def test_sshd_killed_during_a_mode_tears_down_and_names_the_pod(drill: Drill):
    run_id = "lost"
    log = drill.tmp / "lost.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            drill.command({"resume_drill_run_id": run_id, "resume_drill_modes": ["kill"]}),
            cwd=ROOT,
            env=drill.env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            preexec_fn=default_signals,
        )
    try:
        deadline = time.monotonic() + 600
        while "start training (returns at once), mode kill" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.1)
        (pod,) = [p for p in drill.pods_of(run_id) if p["status"] == "RUNNING"]
        kill_sshd(f"rpdrill-{pod['id']}")
        rc = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    printed = " ".join(log.read_text().split())
    assert rc != 0, printed[-4000:]
    assert f"Drill stopped: pod {pod['id']} stopped answering (unreachable) during the run {run_id}-kill." in printed, (
        printed[-4000:]
    )
    # Torn down as configured (resume_drill_keep false), and recorded.
    assert all(p["status"] == "TERMINATED" for p in drill.pods_of(run_id)) and drill.volumes_of(run_id) == []
    state = state_of(drill.runs / run_id)
    assert state["unreachable"]["pod"] == pod["id"] and state["unreachable"]["during"] == f"the run {run_id}-kill"
    recorded = [r for r in state["resources"] if r["kind"] == "pod"]
    assert recorded and all(r["final"]["status"] == "TERMINATED" for r in recorded), recorded
