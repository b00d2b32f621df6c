"""trainops.gpu.drill_evidence through a real ansible-playbook on localhost, on real trainer journals: an
uninterrupted reference run, a run SIGKILLed mid-way and one stopped by SIGTERM, each resumed to the end,
their checkpoints verified by checkpoint_verify in the same play. The drill passes; a second run changes
nothing; one tampered loss_hex in the killed run's journal fails the play naming the mode and the step."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import struct
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[2]
STEPS = 2000  # about 1.5 s of training on one core: enough for the interruption to land mid-run
INTERRUPT_AT_STEP = 600
TRAINER_TIMEOUT_S = 180
CONFIG = {
    "run_id": "evidence-e2e",
    "steps": STEPS,
    # keep_last above the number of saves: the checkpoint resumed from is still there when the play verifies it.
    "checkpoint": {"mode": "steps", "every_steps": 100, "keep_last": 100},
}

PLAYBOOK = """
- name: Judge the drill
  hosts: localhost
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  tasks:
    - name: Record the provenance of the trainer's source and config
      trainops.gpu.provenance:
        src: "{{ playbook_dir }}/src"
        run_id: evidence-e2e
        runs_dir: "{{ playbook_dir }}/runs"
        command: [python, -m, trainops_train.train, --config, train.json]
        config: "{{ playbook_dir }}/train.json"
        config_is_trainer: true

    - name: Verify the checkpoints of each drilled run
      trainops.gpu.checkpoint_verify:
        path: "{{ item.run_dir }}/ckpt"
      loop: "{{ drilled }}"
      loop_control:
        label: "{{ item.mode }}"
      register: verified

    - name: Judge and write the evidence
      trainops.gpu.drill_evidence:
        evidence_dir: "{{ evidence_dir }}"
        run_id: evidence-e2e
        provenance: "{{ playbook_dir }}/runs/evidence-e2e/provenance.json"
        reference:
          metrics: "{{ reference_dir }}/logs/metrics.jsonl"
          result: "{{ reference_dir }}/logs/result.json"
          events: "{{ reference_dir }}/logs/events.jsonl"
        modes: "{{ modes }}"
        phases: {training: 3.0, interruption: 0.1, recovery: 5.0}
        wall_s: 30.0
      vars:
        modes: >-
          {%- set out = [] -%}
          {%- for item in drilled -%}
          {%-   set _ = out.append({
                  'mode': item.mode,
                  'metrics': item.metrics | default(item.run_dir ~ '/logs/metrics.jsonl'),
                  'events': item.run_dir ~ '/logs/events.jsonl',
                  'result': item.run_dir ~ '/logs/result.json',
                  'interrupted_at': item.interrupted_at,
                  'last_step_before': item.last_step_before,
                  'checkpoint_verify': verified.results[loop.index0],
                  'pods': {'before': {'id': 'local', 'port': none}, 'after': {'id': 'local', 'port': none}}}) -%}
          {%- endfor -%}
          {{ out }}
      register: evidence
"""


def trainer(config: pathlib.Path, run_dir: pathlib.Path) -> subprocess.Popen:
    """Start the trainer; its output goes to a file beside the run directory (a pipe nobody reads could fill)."""
    command = [sys.executable, "-m", "trainops_train.train", "--config", str(config), "--run-dir", str(run_dir)]
    log = run_dir.with_name(run_dir.name + ".log")
    with open(log, "a") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    process.log = log  # type: ignore[attr-defined]
    return process


def output_of(process: subprocess.Popen) -> str:
    return process.log.read_text()[-3000:]  # type: ignore[attr-defined]


def last_step(metrics: pathlib.Path) -> int:
    """The last complete journal line's step (a torn last line does not count), 0 before the first."""
    try:
        text = metrics.read_text()
    except FileNotFoundError:
        return 0
    lines = text.split("\n")[:-1]  # the part after the last newline is torn or empty
    return json.loads(lines[-1])["step"] if lines else 0


def interrupt(process: subprocess.Popen, metrics: pathlib.Path, signum: int) -> tuple[float, int]:
    """Send ``signum`` once the journal reaches INTERRUPT_AT_STEP; returns (interrupted_at, last step in the
    journal once the trainer has died), the two figures the drill records."""
    deadline = time.monotonic() + TRAINER_TIMEOUT_S
    while last_step(metrics) < INTERRUPT_AT_STEP:
        assert process.poll() is None, f"the trainer ended before step {INTERRUPT_AT_STEP}: {output_of(process)}"
        assert time.monotonic() < deadline, f"the trainer did not reach step {INTERRUPT_AT_STEP} in time"
        time.sleep(0.005)
    interrupted_at = time.time()
    process.send_signal(signum)
    process.wait(timeout=TRAINER_TIMEOUT_S)
    steps_left = STEPS - last_step(metrics)
    assert steps_left > 0, "the interruption landed after the last step"
    return interrupted_at, last_step(metrics)


def finish(process: subprocess.Popen, expected: int) -> None:
    process.wait(timeout=TRAINER_TIMEOUT_S)
    assert process.returncode == expected, output_of(process)


@pytest.fixture(scope="module")
def drill(tmp_path_factory):
    """Real trainer runs: the reference, a SIGKILLed and a SIGTERMed run, each resumed to the end."""
    base = tmp_path_factory.mktemp("drill")
    config = base / "train.json"
    config.write_text(json.dumps(CONFIG))
    reference = base / "reference"
    runs = {"kill": base / "kill", "sigterm": base / "sigterm"}
    started = {"reference": trainer(config, reference), **{m: trainer(config, d) for m, d in runs.items()}}
    kill_at, kill_last = interrupt(started["kill"], runs["kill"] / "logs" / "metrics.jsonl", signal.SIGKILL)
    term_at, term_last = interrupt(started["sigterm"], runs["sigterm"] / "logs" / "metrics.jsonl", signal.SIGTERM)
    assert started["kill"].returncode == -signal.SIGKILL
    assert started["sigterm"].returncode == 75, output_of(started["sigterm"])
    resumed = {mode: trainer(config, run_dir) for mode, run_dir in runs.items()}
    finish(started["reference"], 0)
    for process in resumed.values():
        finish(process, 0)
    drilled = [
        {"mode": "kill", "run_dir": str(runs["kill"]), "interrupted_at": kill_at, "last_step_before": kill_last},
        {"mode": "sigterm", "run_dir": str(runs["sigterm"]), "interrupted_at": term_at, "last_step_before": term_last},
    ]
    (base / "playbook.yml").write_text(PLAYBOOK)
    source = base / "src"  # a committed source tree for the provenance record
    source.mkdir()
    (source / "README").write_text("trainer source stand-in\n")
    git = ["git", "-C", str(source), "-c", "user.name=Test", "-c", "user.email=test@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "-c", "commit.gpgsign=false", "commit", "-q", "-m", "source"], check=True)
    return base, drilled


def play(base: pathlib.Path, variables: dict) -> tuple[int, dict, str]:
    """Run the playbook; returns (exit status, drill_evidence's result, output)."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"), ANSIBLE_STDOUT_CALLBACK="json")
    env.pop("ANSIBLE_CONFIG", None)
    (base / "vars.json").write_text(json.dumps(variables))
    command = [str(pathlib.Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "-c", "local"]
    command += ["playbook.yml", "-e", "@vars.json"]
    done = subprocess.run(command, cwd=base, env=env, capture_output=True, text=True, timeout=300, check=False)
    try:
        report = json.loads(done.stdout[done.stdout.index("{") :])
    except ValueError:
        pytest.fail("no JSON from ansible-playbook: " + done.stdout[-3000:] + done.stderr[-3000:])
    tasks = report["plays"][0]["tasks"]
    judged = [t for t in tasks if t["task"]["name"] == "Judge and write the evidence"]
    assert judged, done.stdout[-3000:] + done.stderr[-3000:]
    return done.returncode, judged[0]["hosts"]["localhost"], done.stdout + done.stderr


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_drill_passes_then_a_tampered_step_fails(drill):
    base, drilled = drill
    evidence = base / "evidence"
    variables = {"drilled": drilled, "reference_dir": str(base / "reference"), "evidence_dir": str(evidence)}
    rc, result, output = play(base, variables)
    assert rc == 0 and result["passed"] is True and result["changed"] is True, output[-4000:]
    modes = {m["mode"]: m for m in result["modes"]}
    assert set(modes) == {"kill", "sigterm"}
    for entry in drilled:
        mode = modes[entry["mode"]]
        assert mode["status"] == "PASS" and mode["checkpoint"]["verified"] is True
        assert mode["journal"]["equal"] and mode["journal"]["steps_compared"] == STEPS
        assert mode["resumed_from_step"] % 100 == 0 or mode["resumed_from_step"] == entry["last_step_before"]
        assert mode["rpo_steps"] == entry["last_step_before"] - mode["resumed_from_step"] >= 0
        assert 0 < mode["rto_s"] < TRAINER_TIMEOUT_S
        assert mode["trainer_start_s"] <= mode["resume_s"] <= mode["rto_s"]
    # A graceful stop checkpoints the last step it finished: nothing is lost.
    assert modes["sigterm"]["rpo_steps"] == 0
    report = json.loads((evidence / "report.json").read_text())
    assert report["passed"] is True and report["reference"]["steps"] == STEPS
    commit = subprocess.run(
        ["git", "-C", str(base / "src"), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    )
    assert report["provenance"]["commit"] == commit.stdout.strip() and report["provenance"]["dirty"] is False
    # The config hash provenance computed is the one the trainer wrote into the run's events.
    events = (pathlib.Path(drilled[0]["run_dir"]) / "logs" / "events.jsonl").read_text().splitlines()
    start = next(json.loads(line) for line in events if json.loads(line)["event"] == "start")
    assert report["provenance"]["config_hash"] == start["config_hash"]
    # Every evidence file names the config hash that ran (the trainer's, in the reference's and each mode's start).
    reference_events = (base / "reference" / "logs" / "events.jsonl").read_text().splitlines()
    assert {json.loads(line)["config_hash"] for line in reference_events if '"start"' in line} == {start["config_hash"]}
    assert report["config_hash"] == report["reference"]["config_hash"] == start["config_hash"]
    assert [m["config_hash"] for m in report["modes"]] == [start["config_hash"]] * 2
    assert report["provenance"]["command"] == "python -m trainops_train.train --config train.json"
    assert [m["rto_s"] for m in report["modes"]] == [modes["kill"]["rto_s"], modes["sigterm"]["rto_s"]]
    markdown = (evidence / "report.md").read_text()
    assert markdown.startswith("# Resume drill evidence-e2e: PASS")
    assert "| kill | **PASS** |" in markdown and "| sigterm | **PASS** |" in markdown
    assert f"config hash `{start['config_hash']}`," in markdown and "`None`" not in markdown
    png = (evidence / "loss.png").read_bytes()
    assert 20_000 < len(png) < 2_000_000 and png_size(png) == (1000, 650)

    rc, again, output = play(base, variables)
    assert rc == 0 and again["changed"] is False, output[-4000:]

    # One loss in the killed run's journal, after the step it resumed from, flipped in its last bit.
    tampered_step = modes["kill"]["resumed_from_step"] + 37
    source = pathlib.Path(drilled[0]["run_dir"]) / "logs" / "metrics.jsonl"
    lines = [json.loads(line) for line in source.read_text().splitlines()]
    line = next(record for record in lines if record["step"] == tampered_step)
    original = line["loss_hex"]
    value = float.fromhex(original)
    bits = struct.unpack(">Q", struct.pack(">d", value))[0] ^ 1
    line["loss_hex"] = struct.unpack(">d", struct.pack(">Q", bits))[0].hex()
    tampered = base / "tampered-metrics.jsonl"
    tampered.write_text("".join(json.dumps(record, sort_keys=True) + "\n" for record in lines))
    bad = [dict(drilled[0], metrics=str(tampered)), drilled[1]]
    failed_evidence = base / "evidence-tampered"
    rc, result, output = play(base, dict(variables, drilled=bad, evidence_dir=str(failed_evidence)))
    assert rc != 0 and result["failed"] is True and result["failed_modes"] == ["kill"]
    expected = f"kill: step {tampered_step}: loss_hex differs (reference {original}, resumed {line['loss_hex']})"
    assert expected in result["msg"] and expected in output
    report = json.loads((failed_evidence / "report.json").read_text())
    assert report["passed"] is False and report["modes"][0]["first_differing_step"] == tampered_step
    assert "| kill | **FAIL** |" in (failed_evidence / "report.md").read_text()
    assert (failed_evidence / "loss.png").stat().st_size > 20_000
    shutil.rmtree(failed_evidence)
