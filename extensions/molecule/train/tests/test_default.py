"""The train scenario's verifier: the job's files, result.json, the journal and checkpoints on the pod."""

from __future__ import annotations

import json
import os

import pytest
import testinfra

CONTAINER = "trainops-molecule-train"
RUN = "/workspace/trainops/molecule-train"
JOB = f"{RUN}/job/train"
REFUSED = "/workspace/trainops/molecule-train-refused"


@pytest.fixture(scope="module")
def pod():
    os.environ.setdefault(
        "CONTAINERS_CONF", os.environ.get("MOLECULE_PROJECT_DIRECTORY", "") + "/config/containers.conf"
    )
    return testinfra.get_host(f"podman://{CONTAINER}")


def read_json(pod, path: str):
    return json.loads(pod.file(path).content_string)


def jsonl(pod, path: str) -> list[dict]:
    return [json.loads(line) for line in pod.file(path).content_string.splitlines() if line.strip()]


def test_two_lives_interrupted_then_finished(pod):
    assert pod.file(f"{JOB}/exit_code").content_string.strip() == "0"
    assert pod.file(f"{JOB}/previous/1/exit_code").content_string.strip() == "75"
    # Idempotence: the second converge started nothing, so there is exactly one earlier life.
    assert pod.check_output(f"ls {JOB}/previous") == "1"
    result = read_json(pod, f"{RUN}/logs/result.json")
    assert result["status"] == "finished" and result["exit_code"] == 0 and result["step"] == 60
    assert result["checkpoint"] == f"{RUN}/ckpt/step-00000060"


def test_resumed_from_the_checkpoint_of_the_interruption(pod):
    events = jsonl(pod, f"{RUN}/logs/events.jsonl")
    exits = [e for e in events if e["event"] == "exit"]
    assert [e["status"] for e in exits] == ["interrupted", "finished"]
    resumes = [e for e in events if e["event"] == "resume"]
    assert len(resumes) == 1 and resumes[0]["step"] == exits[0]["step"]
    steps = [r["step"] for r in jsonl(pod, f"{RUN}/logs/metrics.jsonl")]
    assert steps == list(range(1, 61))


def test_checkpoints_verify_with_sha256sum(pod):
    # every_steps counts from the step resumed from; the final step is saved too; keep_last 3.
    resumed = next(e["step"] for e in jsonl(pod, f"{RUN}/logs/events.jsonl") if e["event"] == "resume")
    expected = sorted({*range(resumed + 5, 61, 5), 60})[-3:]
    names = pod.check_output(f"ls {RUN}/ckpt").split()
    steps = sorted(n for n in names if n.startswith("step-"))
    assert steps == [f"step-{step:08d}" for step in expected]
    for name in steps:
        check = pod.run(f"cd {RUN}/ckpt/{name} && sha256sum --check --strict SHA256SUMS")
        assert check.rc == 0, check.stdout + check.stderr
        manifest = read_json(pod, f"{RUN}/ckpt/{name}/manifest.json")
        assert manifest["step"] == int(name.split("-")[1]) and manifest["run_id"] == "molecule-train"


def test_cadence_and_config_recorded(pod):
    cadence = read_json(pod, f"{JOB}/cadence.json")
    assert cadence["mode"] == "steps" and cadence["every_steps"] == 5
    assert "every 5 steps" in cadence["reason"]
    assert read_json(pod, f"{JOB}/previous/1/cadence.json") == cadence
    config = read_json(pod, f"{RUN}/train-config.json")
    assert config["steps"] == 60 and config["checkpoint"]["every_steps"] == 5


def test_env_value_reached_the_job_but_no_file(pod):
    command = read_json(pod, f"{JOB}/command.json")
    assert "TRAIN_MOLECULE_STEP_SLEEP" in command["env_names"] and "PYTHONPATH" in command["env_names"]


def test_auto_cadence_run(pod):
    run = "/workspace/trainops/molecule-train-auto"
    cadence = read_json(pod, f"{run}/job/train/cadence.json")
    assert cadence["mode"] == "auto" and cadence["mtbi_seconds"] == 60 and cadence["every_steps"] is None
    saves = [e for e in jsonl(pod, f"{run}/logs/events.jsonl") if e["event"] == "save_end"]
    assert saves and saves[0]["step"] == 1 and all(e["next_interval_s"] > 0 for e in saves)
    assert read_json(pod, f"{run}/logs/result.json")["status"] == "finished"


def test_refused_run_and_bad_input(pod):
    assert pod.file(f"{REFUSED}/job/train/exit_code").content_string.strip() == "2"
    assert "no_such_key" in pod.file(f"{REFUSED}/job/train/output.log").content_string
    assert not pod.file(f"{REFUSED}/ckpt").exists
    assert not pod.file("/workspace/trainops/molecule-train-bad-input").exists
