"""The `job` module over real SSH on emulator pods (podman backend): detached start, exit codes, signals,
lost jobs, attach instead of a second copy (after a cut connection, under a race) and telemetry.

One emulator and two pods (a GPU pod with the emulated nvidia-smi, a CPU pod without it) serve the module.
Every call goes through real `ansible`/`ansible-playbook` (pipelining, no SSH ControlMaster, so killing the
ansible process cuts the connection) with the pod's /usr/bin/python3.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest
from runpod_emulator.testing import EmulatorProcess, ansible_env, ssh_run, wait_for_login

pytestmark = pytest.mark.podman

ROOT = Path(__file__).resolve().parents[2]
GPU = "NVIDIA H100 80GB HBM3"
DURABLE = "/workspace"
RUN_ID = "jobrun"
RUN_DIR = f"{DURABLE}/trainops/{RUN_ID}"
JOBS = f"{RUN_DIR}/job"


class Pods:
    def __init__(self, emulator: EmulatorProcess, key: Path, inventory: Path, ports: dict[str, int], tmp: Path):
        self.emulator = emulator
        self.key = key
        self.inventory = inventory
        self.ports = ports
        self.tmp = tmp

    def env(self) -> dict[str, str]:
        return ansible_env(
            self.emulator.url,
            self.emulator.api_key,
            ANSIBLE_HOST_KEY_CHECKING="False",
            ANSIBLE_PIPELINING="True",
            # No ControlMaster: the connection dies with the ansible process.
            ANSIBLE_SSH_ARGS="-o ControlMaster=no -o ControlPersist=no -o UserKnownHostsFile=/dev/null",
            ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
            ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
            ANSIBLE_RETRY_FILES_ENABLED="False",
        )

    def adhoc_cmd(self, host: str, args: dict, check: bool = False) -> list[str]:
        cmd = ["ansible", host, "-i", str(self.inventory), "-m", "trainops.gpu.job", "-a", json.dumps(args)]
        return [*cmd, "--check"] if check else cmd

    def spawn(self, host: str, args: dict) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.adhoc_cmd(host, args),
            cwd=ROOT,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def job(self, host: str, **args) -> dict:
        """One ad-hoc call of the module; its result for `host`."""
        args = {"run_id": RUN_ID, "durable_root": DURABLE, **args}
        proc = self.spawn(host, args)
        out, err = proc.communicate(timeout=120)
        return host_result(out, err, host)

    def playbook(self, host: str, tasks: list[dict]) -> list[dict]:
        """Run tasks (module_defaults: run_id, durable_root) in one play; each task's result for `host`."""
        play = [
            {
                "hosts": host,
                "gather_facts": False,
                "module_defaults": {"trainops.gpu.job": {"run_id": RUN_ID, "durable_root": DURABLE}},
                "tasks": tasks,
            }
        ]
        path = self.tmp / f"play-{time.monotonic_ns()}.yml"
        path.write_text(json.dumps(play))
        done = subprocess.run(
            ["ansible-playbook", "-i", str(self.inventory), str(path)],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        try:
            report = json.loads(done.stdout[done.stdout.index("{") :])
        except ValueError:
            pytest.fail(f"ansible-playbook printed no JSON (rc={done.returncode}): {done.stdout}\n{done.stderr}")
        results = []
        for task in report["plays"][0]["tasks"]:
            result = dict(task["hosts"][host])
            result["_duration_s"] = _duration(task["task"]["duration"])
            results.append(result)
        if len(results) != len(tasks):
            pytest.fail(f"the play stopped at task {len(results)}: {json.dumps(results[-1], indent=1)}")
        return results

    def ssh(self, host: str, command: str) -> str:
        result = ssh_run(self.key, self.ports[host], command, timeout_s=30)
        assert result.returncode == 0, f"{command}: {result.stderr}"
        return result.stdout


def _duration(duration: dict) -> float:
    start = datetime.fromisoformat(duration["start"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(duration["end"].replace("Z", "+00:00"))
    return (end - start).total_seconds()


def host_result(out: str, err: str, host: str) -> dict:
    try:
        report = json.loads(out[out.index("{") :])
        return report["plays"][0]["tasks"][0]["hosts"][host]
    except (ValueError, KeyError, IndexError):
        pytest.fail(f"ansible printed no result for {host}: {out}\n{err}")


@pytest.fixture(scope="module")
def pods(tmp_path_factory: pytest.TempPathFactory, pod_image: str):
    tmp = tmp_path_factory.mktemp("job")
    key = tmp / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "job-test", "-f", str(key)], check=True)
    with EmulatorProcess(
        backend="podman", state_dir=tmp / "emu", extra_args=["--container-prefix", "rpemu-job"]
    ) as emulator:
        emulator.admin("PUT", "/v2/account/ssh-keys", {"keys": [key.with_suffix(".pub").read_text().strip()]})
        bodies = {
            "gpu": {"gpu": {"id": GPU, "count": 2}},
            "cpu": {"cpu": {"id": "cpu3c", "vcpuCount": 2}},
        }
        ids = {}
        for host, extra in bodies.items():
            body = {"name": f"job-{host}", "image": "runpod/pytorch", "ports": ["22/tcp"], "startSsh": True, **extra}
            status, _headers, pod = emulator.api("POST", "/v2/pods", body)
            assert status == 201, pod
            ids[host] = pod["id"]
        ports = {}
        for host, pod_id in ids.items():
            ready = emulator.wait_for(pod_id, lambda p: p["ssh"]["direct"] is not None, 120)
            ports[host] = ready["ssh"]["direct"]["port"]
            wait_for_login(key, ports[host], timeout_s=60)
        inventory = tmp / "inventory.ini"
        inventory.write_text(
            "".join(
                f"{host} ansible_host=127.0.0.1 ansible_port={port} ansible_user=root "
                f"ansible_ssh_private_key_file={key} ansible_python_interpreter=/usr/bin/python3\n"
                for host, port in ports.items()
            )
        )
        yield Pods(emulator, key, inventory, ports, tmp)


def test_exit_codes_signals_restart_and_check_mode(pods: Pods):
    sleep = {"command": ["sleep", "60"]}
    tasks = [
        # Long jobs first, so that each has set up its traps before it is stopped.
        {"name": "stubborn", "trainops.gpu.job": {"name": "stubborn", "command": "trap '' TERM; sleep 60"}},
        {"name": "killed", "trainops.gpu.job": {"name": "killed", "launcher": "setsid", **sleep}},
        {"name": "term", "trainops.gpu.job": {"name": "term", **sleep}},
        {"name": "ok", "trainops.gpu.job": {"name": "ok", "command": "echo hello; exit 0", "wait": 30}},
        {"name": "fail", "trainops.gpu.job": {"name": "fail", "command": "echo oops >&2; exit 3", "wait": 30}},
        {
            "name": "interrupted",
            "trainops.gpu.job": {
                "name": "interrupted",
                "command": 'mkdir -p logs && echo \'{"status": "interrupted", "exit_code": 75}\' '
                "> logs/result.json && exit 75",
                "wait": 30,
            },
        },
        {
            "name": "secret",
            "trainops.gpu.job": {
                "name": "secret",
                "command": 'echo "$PLAIN"; [ "$(printf %s "$API_TOKEN" | wc -c)" -eq 13 ] && echo token-ok',
                "env": {"API_TOKEN": "tok-s3cr3t-42", "PLAIN": "plain-v"},
                "wait": 30,
            },
        },
        {"name": "sigkill", "trainops.gpu.job": {"name": "killed", "state": "stopped", "signal": "SIGKILL"}},
        {"name": "sigterm", "trainops.gpu.job": {"name": "term", "state": "stopped", "grace": 10}},
        {"name": "escalate", "trainops.gpu.job": {"name": "stubborn", "state": "stopped", "grace": 2}},
        {"name": "stop ended", "trainops.gpu.job": {"name": "ok", "state": "stopped"}},
        {"name": "again", "trainops.gpu.job": {"name": "fail", "command": "exit 0"}, "ignore_errors": True},
        {"name": "restart", "trainops.gpu.job": {"name": "fail", "command": "exit 0", "restart": True, "wait": 30}},
        {"name": "check", "trainops.gpu.job": {"name": "never", "command": "true"}, "check_mode": True},
        {"name": "status absent", "trainops.gpu.job": {"name": "never", "state": "status"}},
    ]
    r = {task["name"]: result for task, result in zip(tasks, pods.playbook("gpu", tasks), strict=True)}

    assert r["stubborn"]["changed"] and r["stubborn"]["state"] == "running" and r["stubborn"]["launcher"] == "tmux"
    assert r["killed"]["launcher"] == "setsid" and r["killed"]["pid"] > 0

    ok = r["ok"]
    assert (ok["state"], ok["exit_code"], ok["result_known"], ok["output_tail"]) == ("exited", 0, True, ["hello"])
    assert ok["_duration_s"] < 15, "wait returns when the job ends"
    assert ok["started_at"].endswith("+00:00") and ok["ended_at"] >= ok["started_at"]
    fail = r["fail"]
    assert (fail["state"], fail["exit_code"], fail["output_tail"]) == ("exited", 3, ["oops"])
    assert not fail.get("failed"), "a job's exit code does not fail the module"
    interrupted = r["interrupted"]
    assert (interrupted["exit_code"], interrupted["result_status"]) == (75, "interrupted")
    assert r["secret"]["output_tail"] == ["plain-v", "token-ok"] and r["secret"]["exit_code"] == 0
    assert "tok-s3cr3t-42" not in json.dumps(r["secret"])

    # Signals: 128 + the signal number, and the signal's name.
    assert (r["sigkill"]["signals_sent"], r["sigkill"]["exit_code"], r["sigkill"]["exit_signal"]) == (
        ["SIGKILL"],
        137,
        "SIGKILL",
    )
    assert (r["sigterm"]["signals_sent"], r["sigterm"]["exit_code"], r["sigterm"]["exit_signal"]) == (
        ["SIGTERM"],
        143,
        "SIGTERM",
    )
    escalate = r["escalate"]
    assert (escalate["signals_sent"], escalate["exit_code"], escalate["exit_signal"]) == (
        ["SIGTERM", "SIGKILL"],
        137,
        "SIGKILL",
    )
    assert r["stop ended"]["changed"] is False and r["stop ended"]["signals_sent"] == []

    # An ended job starts again only with restart, its files kept.
    assert r["again"]["failed"] and "restart=true" in r["again"]["msg"] and r["again"]["exit_code"] == 3
    restart = r["restart"]
    assert restart["changed"] and restart["exit_code"] == 0
    assert restart["archived_to"] == f"{JOBS}/fail/previous/1"
    assert pods.ssh("gpu", f"cat {JOBS}/fail/previous/1/exit_code {JOBS}/fail/previous/1/output.log") == "3\noops\n"

    # Check mode changes nothing.
    assert r["check"]["changed"] and r["check"]["state"] == "absent"
    assert r["status absent"]["state"] == "absent" and r["status absent"]["result_known"] is False
    listing = pods.ssh("gpu", f"ls {JOBS}; grep -rl tok-s3cr3t-42 {RUN_DIR} || echo no-secret")
    assert "never" not in listing.split() and "no-secret" in listing
    files = pods.ssh("gpu", f"ls -A {JOBS}/ok").split()
    assert {"pid", "output.log", "exit_code", "started_at", "ended_at", "telemetry.jsonl"} <= set(files)
    assert "env.fifo" not in files


def test_telemetry_every_3_s_with_gpus_only_in_the_gpu_pod(pods: Pods):
    args = {"name": "telemetry", "run_id": RUN_ID, "durable_root": DURABLE, "command": ["sleep", "7"], "wait": 30}
    proc = pods.spawn("all", args)
    out, err = proc.communicate(timeout=120)
    for host in ("gpu", "cpu"):
        result = host_result(out, err, host)
        assert result["exit_code"] == 0, result
        samples = [json.loads(line) for line in pods.ssh(host, f"cat {JOBS}/telemetry/telemetry.jsonl").splitlines()]
        assert len(samples) >= 3 and result["telemetry_samples"] == len(samples)
        assert result["telemetry_last"] == samples[-1]
        stamps = [datetime.fromisoformat(s["ts"]) for s in samples]
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(stamps)]
        assert all(2.5 <= gap <= 3.5 for gap in gaps), gaps
        for sample in samples:
            assert sample["rss_bytes"] > 0 and sample["processes"] >= 1
            assert sample["cpu_seconds"] >= 0 and sample["cpu_percent"] >= 0
            assert stamps[0].utcoffset().total_seconds() == 0
        if host == "gpu":
            for sample in samples:
                assert [g["index"] for g in sample["gpus"]] == [0, 1]
                assert all(g["memory_total_mib"] == 81559 for g in sample["gpus"])
                assert all(g["memory_used_mib"] == 0 and g["utilization_percent"] == 0 for g in sample["gpus"])
        else:
            assert all("gpus" not in sample for sample in samples)


def test_two_concurrent_starts_yield_one_process(pods: Pods):
    args = {"name": "race", "run_id": RUN_ID, "durable_root": DURABLE, "command": ["sleep", "31"]}
    procs = [pods.spawn("gpu", args) for _index in range(2)]
    results = [host_result(*proc.communicate(timeout=120), "gpu") for proc in procs]
    assert sorted(r["changed"] for r in results) == [False, True]
    assert results[0]["pid"] == results[1]["pid"]
    assert pods.ssh("gpu", "pgrep -c -x -f 'sleep 31'").strip() == "1"
    stopped = pods.job("gpu", name="race", state="stopped", signal="SIGKILL")
    assert stopped["exit_code"] == 137


def test_reattach_after_the_connection_is_cut_mid_wait(pods: Pods):
    args = {"name": "reattach", "run_id": RUN_ID, "durable_root": DURABLE, "command": ["sleep", "8"], "wait": 60}
    proc = pods.spawn("gpu", args)
    deadline = time.monotonic() + 30
    while "pid" not in pods.ssh("gpu", f"ls {JOBS}/reattach 2>/dev/null || true").split():
        assert time.monotonic() < deadline and proc.poll() is None, "the job did not start"
        time.sleep(0.3)
    time.sleep(1)
    os.killpg(proc.pid, signal.SIGKILL)  # ansible and its ssh: the controller's connection is gone
    proc.communicate(timeout=30)
    pid = int(pods.ssh("gpu", f"cat {JOBS}/reattach/pid"))
    again = pods.job("gpu", name="reattach", command=["sleep", "8"])
    assert (again["changed"], again["pid"], again["state"]) == (False, pid, "running")
    final = pods.job("gpu", name="reattach", state="status", wait=30)
    assert (final["state"], final["exit_code"], final["pid"]) == ("exited", 0, pid)


def test_a_job_whose_supervisor_was_killed_is_lost(pods: Pods):
    started = pods.job("gpu", name="lost", command=["sleep", "300"])
    assert started["changed"] and started["state"] == "running"
    pods.ssh("gpu", f"kill -9 {started['supervisor_pid']} {started['pid']}")
    tasks = [
        {"name": "status", "trainops.gpu.job": {"name": "lost", "state": "status"}},
        {"name": "again", "trainops.gpu.job": {"name": "lost", "command": ["sleep", "300"]}, "ignore_errors": True},
        {
            "name": "bad chdir",
            "trainops.gpu.job": {"name": "lost", "command": ["true"], "restart": True, "chdir": "/nonexistent"},
            "ignore_errors": True,
        },
        {"name": "restart", "trainops.gpu.job": {"name": "lost", "command": ["sleep", "300"], "restart": True}},
        {"name": "short wait", "trainops.gpu.job": {"name": "lost", "state": "status", "wait": 1}},
        {"name": "stop", "trainops.gpu.job": {"name": "lost", "state": "stopped", "signal": "KILL"}},
    ]
    r = {task["name"]: result for task, result in zip(tasks, pods.playbook("gpu", tasks), strict=True)}
    lost = r["status"]
    assert (lost["state"], lost["result_known"], lost["exit_code"], lost["ended_at"]) == ("lost", False, None, None)
    assert not lost.get("failed") and lost["pid"] == started["pid"]
    assert r["again"]["failed"] and "lost" in r["again"]["msg"]
    assert r["bad chdir"]["failed"] and "/nonexistent" in r["bad chdir"]["msg"]
    assert r["restart"]["changed"] and r["restart"]["pid"] != started["pid"]
    assert r["restart"]["archived_to"] == f"{JOBS}/lost/previous/1"
    assert (r["short wait"]["state"], r["short wait"]["wait_expired"]) == ("running", True)
    assert r["stop"]["exit_code"] == 137 and r["stop"]["signals_sent"] == ["SIGKILL"]
