# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The job module's supervisor (module_utils/_job_supervisor.py), as code and as the program the module writes to a
job directory: its source survives the AnsiballZ zip, it records exit codes and signals, forwards SIGTERM and
SIGINT, starts the command with default signal dispositions (even when it was started with SIGINT and SIGHUP
ignored, as from `cmd &` in a script, or under nohup), and writes its output, state and telemetry files."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
import zipfile

import pytest

from ansible_collections.trainops.gpu.plugins.module_utils import _job_supervisor as sup
from ansible_collections.trainops.gpu.plugins.module_utils import _run_layout
from ansible_collections.trainops.gpu.plugins.modules import job

# Starts argv[1:] with SIGINT and SIGHUP ignored, as a shell does for `nohup cmd &` in a script.
IGNORING = (
    "import os, signal, sys; "
    "signal.signal(signal.SIGINT, signal.SIG_IGN); signal.signal(signal.SIGHUP, signal.SIG_IGN); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def wait_for(path, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout_s} s"
        time.sleep(0.02)
    with open(path) as handle:
        return handle.read().strip()


class Supervised:
    """A supervisor started as the job module starts it: its source written to <job_dir>/supervisor.py,
    command.json, env.fifo, then `python3 supervisor.py <job_dir>` in a new session."""

    def __init__(self, job_dir, argv, interval=5.0, ignoring=False, env=None):
        self.job_dir = str(job_dir)
        supervisor = os.path.join(self.job_dir, job.SUPERVISOR_NAME)
        with open(supervisor, "w") as handle:
            handle.write(job.supervisor_source())
        config = {"argv": argv, "chdir": self.job_dir, "telemetry_interval": interval}
        with open(self.path(job.COMMAND_NAME), "w") as handle:
            json.dump(config, handle)
        os.mkfifo(self.path(job.ENV_FIFO_NAME), 0o600)
        prefix = [sys.executable, "-c", IGNORING] if ignoring else []
        self.process = subprocess.Popen([*prefix, sys.executable, supervisor, self.job_dir], start_new_session=True)
        with open(self.path(job.ENV_FIFO_NAME), "wb") as fifo:
            fifo.write(json.dumps(dict(os.environ) if env is None else env).encode("utf-8"))

    def path(self, name):
        return os.path.join(self.job_dir, name)

    def wait_for(self, name, timeout_s=20.0):
        return wait_for(self.path(name), timeout_s)

    def pid(self):
        return int(self.wait_for(job.JOB_PID_NAME))

    def finish(self):
        """Wait for the supervisor to end; (its exit status, exit_code, exit_signal or None)."""
        code = self.wait_for(job.JOB_EXIT_CODE_NAME)
        status = self.process.wait(timeout=20)
        signal_name = self.wait_for(job.EXIT_SIGNAL_NAME) if os.path.exists(self.path(job.EXIT_SIGNAL_NAME)) else None
        return status, code, signal_name

    def kill(self):
        pid = None
        if os.path.exists(self.path(job.JOB_PID_NAME)):
            with contextlib.suppress(ValueError, OSError):
                pid = int(self.wait_for(job.JOB_PID_NAME))
        for target, killer in ((pid, os.killpg), (self.process.pid, os.kill)):
            if target:
                with contextlib.suppress(OSError):
                    killer(target, signal.SIGKILL)
        self.process.wait(timeout=20)


@pytest.fixture
def supervised(tmp_path):
    started = []

    def start(argv, **kwargs):
        started.append(Supervised(tmp_path, argv, **kwargs))
        return started[-1]

    yield start
    for item in started:
        item.kill()


def test_the_command_gets_default_signals_though_the_supervisor_ignores_some(tmp_path, supervised):
    report = os.path.join(str(tmp_path), "ignored.json")
    # The command records which signals it ignores, then sleeps until a signal ends it.
    script = (
        "import json, signal, sys, time; "
        "names = ('SIGINT', 'SIGTERM', 'SIGQUIT', 'SIGHUP'); "
        "ignored = [n for n in names if signal.getsignal(getattr(signal, n)) == signal.SIG_IGN]; "
        "open(sys.argv[1], 'w').write(json.dumps(ignored)); "
        "time.sleep(60)"
    )
    run = supervised([sys.executable, "-c", script, report], ignoring=True)
    run.pid()
    wait_for(report)
    with open(report) as handle:
        assert json.load(handle) == []
    # state=stopped with signal SIGINT reaches the supervisor, which forwards it to the command's group.
    os.kill(run.process.pid, signal.SIGINT)
    assert run.finish() == (0, "130", "SIGINT")


def test_an_exit_code_is_recorded_with_the_files_of_the_job(supervised):
    run = supervised([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"])
    assert run.finish() == (0, "3", None)
    with open(run.path(job.JOB_OUTPUT_NAME)) as handle:
        assert sorted(handle.read().split()) == ["err", "out"]
    for name in (job.JOB_STARTED_AT_NAME, job.JOB_ENDED_AT_NAME):
        assert run.wait_for(name).endswith("+00:00")
    state = json.loads(run.wait_for(job.SUPERVISOR_STATE_NAME))
    assert state["supervisor_pid"] == run.process.pid
    assert state["command_pid"] == run.pid()
    assert set(state) == {
        "supervisor_pid",
        "supervisor_start_ticks",
        "command_pid",
        "command_start_ticks",
        "boot_id",
        "started_epoch",
    }
    # The environment went through the FIFO, which is gone; no temporary file is left behind.
    assert not os.path.exists(run.path(job.ENV_FIFO_NAME))
    assert not [name for name in os.listdir(run.job_dir) if ".tmp-" in name]
    with open(run.path(job.SUPERVISOR_LOG_NAME)) as handle:
        assert "exited with 3" in handle.read()


def test_the_environment_comes_from_the_fifo(supervised):
    env = {"PATH": os.environ.get("PATH", os.defpath), "TRAINOPS_PROBE": "from-the-fifo"}
    run = supervised([sys.executable, "-c", "import os; print(os.environ['TRAINOPS_PROBE'])"], env=env)
    assert run.finish() == (0, "0", None)
    with open(run.path(job.JOB_OUTPUT_NAME)) as handle:
        assert handle.read() == "from-the-fifo\n"
    with open(run.path(job.COMMAND_NAME)) as handle:
        assert "from-the-fifo" not in handle.read()


@pytest.mark.parametrize(
    ("sent", "code", "name"), [(signal.SIGTERM, "143", "SIGTERM"), (signal.SIGKILL, "137", "SIGKILL")]
)
def test_a_signal_that_ends_the_command_is_recorded(supervised, sent, code, name):
    run = supervised([sys.executable, "-c", "import time; time.sleep(60)"])
    pid = run.pid()
    if sent == signal.SIGTERM:
        os.kill(run.process.pid, sent)  # forwarded by the supervisor to the command's process group
    else:
        os.killpg(pid, sent)
    assert run.finish() == (0, code, name)
    with open(run.path(job.SUPERVISOR_LOG_NAME)) as handle:
        text = handle.read()
    assert f"killed by {name}: exit code {code}" in text
    assert ("forwarding it" in text) == (sent == signal.SIGTERM)


def test_a_command_that_cannot_start_exits_127(supervised):
    run = supervised(["/nonexistent/trainops-command"])
    assert run.finish() == (0, "127", None)
    with open(run.path(job.JOB_OUTPUT_NAME)) as handle:
        assert "cannot run '/nonexistent/trainops-command'" in handle.read()
    state = json.loads(run.wait_for(job.SUPERVISOR_STATE_NAME))
    assert state["command_pid"] is None
    assert not os.path.exists(run.path(job.JOB_PID_NAME))


def test_telemetry_is_sampled_while_the_command_runs(supervised):
    run = supervised([sys.executable, "-c", "import time; time.sleep(1.6)"], interval=0.5)
    assert run.finish() == (0, "0", None)
    with open(run.path(job.JOB_TELEMETRY_NAME)) as handle:
        samples = [json.loads(line) for line in handle]
    assert len(samples) >= 2
    assert samples[0]["pid"] == run.pid()
    assert samples[0]["processes"] >= 1
    assert samples[0]["rss_bytes"] > 0
    assert [s["elapsed_s"] for s in samples] == sorted(s["elapsed_s"] for s in samples)
    assert "gpus" not in samples[0] or isinstance(samples[0]["gpus"], list)


def test_the_source_the_module_writes_is_the_supervisor_file():
    with open(sup.__file__.replace(".pyc", ".py"), encoding="utf-8") as handle:
        assert job.supervisor_source() == handle.read()


def test_the_source_is_read_from_a_zip_as_ansiballz_ships_it(tmp_path):
    """AnsiballZ imports module_utils from a zip (zipimport) with or without pipelining: source() needs no file."""
    payload = tmp_path / "payload.zip"
    with zipfile.ZipFile(payload, "w") as archive:
        archive.writestr("probe_pkg/__init__.py", "")
        archive.writestr("probe_pkg/_job_supervisor.py", job.supervisor_source())
    code = "import sys; from probe_pkg import _job_supervisor as s; sys.stdout.write(s.source())"
    done = subprocess.run(
        [sys.executable, "-c", code], env={"PYTHONPATH": str(payload)}, capture_output=True, check=True
    )
    assert done.stdout.decode("utf-8") == job.supervisor_source()


def test_importing_the_supervisor_only_defines_it():
    code = "import sys; sys.argv = ['x']; import _job_supervisor; print('ok')"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=os.path.dirname(sup.__file__),
        env={"PYTHONPATH": os.path.dirname(sup.__file__)},
        capture_output=True,
        check=True,
    )
    assert done.stdout == b"ok\n"


def test_the_file_names_agree_with_the_run_layout():
    assert (sup.PID_NAME, sup.OUTPUT_NAME, sup.EXIT_CODE_NAME, sup.STARTED_AT_NAME, sup.ENDED_AT_NAME) == (
        _run_layout.JOB_PID_NAME,
        _run_layout.JOB_OUTPUT_NAME,
        _run_layout.JOB_EXIT_CODE_NAME,
        _run_layout.JOB_STARTED_AT_NAME,
        _run_layout.JOB_ENDED_AT_NAME,
    )
    assert sup.TELEMETRY_NAME == _run_layout.JOB_TELEMETRY_NAME


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(0, (0, None)), (3 << 8, (3, None)), (75 << 8, (75, None)), (signal.SIGKILL, (137, "SIGKILL"))],
)
def test_exit_status(raw, expected):
    assert sup.exit_status(raw) == expected


def test_exit_status_of_a_signal_python_has_no_name_for(monkeypatch):
    def unnamed(_signum):
        raise ValueError("not a signal")

    monkeypatch.setattr(sup.signal, "Signals", unnamed)
    assert sup.exit_status(signal.SIGUSR1) == (128 + signal.SIGUSR1, f"SIG{int(signal.SIGUSR1)}")


def test_start_error_codes():
    assert sup.start_error_code(FileNotFoundError(2, "no such file")) == 127
    assert sup.start_error_code(PermissionError(13, "permission denied")) == 126


@pytest.mark.parametrize(("text", "expected"), [(" 12 ", 12), ("0.5", 0.5), ("[N/A]", None), ("", None)])
def test_number(text, expected):
    assert sup.number(text) == expected


def fake_nvidia_smi(tmp_path, body):
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_gpu_sample_parses_nvidia_smi(tmp_path):
    smi = fake_nvidia_smi(tmp_path, "echo '0, 40000, 81559, 98'\necho '1, [N/A], 81559, 0'\necho 'garbage'\n")
    assert sup.gpu_sample(smi) == (
        [
            {"index": 0, "memory_used_mib": 40000, "memory_total_mib": 81559, "utilization_percent": 98},
            {"index": 1, "memory_used_mib": None, "memory_total_mib": 81559, "utilization_percent": 0},
        ],
        None,
    )


def test_gpu_sample_reports_a_failing_nvidia_smi(tmp_path):
    smi = fake_nvidia_smi(tmp_path, "echo 'NVIDIA-SMI has failed'\nexit 9\n")
    assert sup.gpu_sample(smi) == ([], "nvidia-smi exited 9: NVIDIA-SMI has failed")
    gpus, error = sup.gpu_sample(str(tmp_path / "missing"))
    assert gpus == [] and error.startswith("FileNotFoundError")


def test_tree_usage_counts_the_process_and_its_children():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 10
        while sup.tree_usage(os.getpid())[0] < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        processes, rss, cpu = sup.tree_usage(os.getpid())
        assert processes >= 2 and rss > 0 and cpu >= 0
        assert sup.tree_usage(child.pid)[0] == 1
    finally:
        child.kill()
        child.wait()
    assert sup.tree_usage(child.pid) == (0, 0, 0.0)


def test_start_ticks_tell_a_process_apart():
    ticks = sup.start_ticks(os.getpid())
    assert ticks is not None
    assert sup.start_ticks(os.getpid()) == ticks
    assert sup.start_ticks(2**22 + 1) is None


def test_write_atomic_leaves_only_the_target(tmp_path):
    sup.write_atomic(str(tmp_path), "exit_code", "0\n")
    sup.write_atomic(str(tmp_path), "exit_code", "3\n")
    assert os.listdir(str(tmp_path)) == ["exit_code"]
    assert (tmp_path / "exit_code").read_text() == "3\n"
    assert stat.S_IMODE(os.stat(str(tmp_path / "exit_code")).st_mode) == 0o644 & ~current_umask()


def current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_default_signals_resets_ignored_and_handled_signals():
    code = textwrap.dedent(
        """
        import signal, sys
        sys.path.insert(0, sys.argv[1])
        import _job_supervisor as s
        for signum in s.DEFAULT_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, lambda *a: None)
        s.default_signals()
        print(all(signal.getsignal(n) == signal.SIG_DFL for n in s.DEFAULT_SIGNALS))
        """
    )
    done = subprocess.run([sys.executable, "-c", code, os.path.dirname(sup.__file__)], capture_output=True, check=True)
    assert done.stdout == b"True\n"
    assert set(sup.DEFAULT_SIGNALS) == {signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP}
    assert set(sup.FORWARDED_SIGNALS) == {signal.SIGTERM, signal.SIGINT}


def test_the_forwarder_signals_the_process_group(monkeypatch):
    sent = []
    monkeypatch.setattr(sup.os, "killpg", lambda pid, signum: sent.append((pid, signum)))
    monkeypatch.setattr(sup, "log", lambda message: None)
    sup.forwarder(4242)(signal.SIGTERM, None)
    assert sent == [(4242, signal.SIGTERM)]

    def gone(pid, signum):
        raise ProcessLookupError(3, "no such process")

    monkeypatch.setattr(sup.os, "killpg", gone)
    sup.forwarder(4242)(signal.SIGINT, None)  # a group that is gone is not an error


def test_the_telemetry_schedule_skips_missed_samples(tmp_path):
    with open(str(tmp_path / "t.jsonl"), "w") as handle:
        start = time.monotonic() - 10.0  # ten intervals late
        telemetry = sup.Telemetry(handle, os.getpid(), 1.0, start, None)
        assert telemetry.due(start)
        sample = telemetry.sample(time.monotonic())
        assert telemetry.next_sample > time.monotonic() - 0.5
        assert not telemetry.due(time.monotonic() - 0.5)
        assert 0.01 <= telemetry.pause() <= 0.1
    assert sample["pid"] == os.getpid() and "gpus" not in sample
    assert json.loads((tmp_path / "t.jsonl").read_text()) == sample


# The job module's judgement of a run and its paths (the train role takes them as they are).


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        ({"state": "running"}, "running"),
        ({"state": "lost"}, "lost"),
        ({"state": "absent"}, "absent"),
        ({"state": "exited", "exit_code": 0, "exit_signal": None, "result_status": None}, "finished"),
        ({"state": "exited", "exit_code": 75, "exit_signal": None, "result_status": None}, "interrupted"),
        ({"state": "exited", "exit_code": 2, "exit_signal": None, "result_status": None}, "refused"),
        ({"state": "exited", "exit_code": 3, "exit_signal": None, "result_status": None}, "failed"),
        ({"state": "exited", "exit_code": 137, "exit_signal": "SIGKILL", "result_status": None}, "unknown"),
        (
            {"state": "exited", "exit_code": 143, "exit_signal": "SIGTERM", "result_status": "interrupted"},
            "interrupted",
        ),
        ({"state": "exited", "exit_code": 1, "exit_signal": None, "result_status": "odd"}, "failed"),
    ],
)
def test_run_status(info, expected):
    assert job.run_status(info) == expected


def test_layout_paths_are_the_run_layouts():
    layout = _run_layout.RunLayout.for_run("/workspace", "run42")
    assert job.layout_paths(layout.run_dir) == {
        "run_dir": "/workspace/trainops/run42",
        "src": layout.src,
        "ckpt": layout.ckpt,
        "logs": layout.logs,
        "metrics": "/workspace/trainops/run42/logs/metrics.jsonl",
        "events": "/workspace/trainops/run42/logs/events.jsonl",
        "result": "/workspace/trainops/run42/logs/result.json",
    }
    assert job.layout_paths(None) is None


@pytest.mark.parametrize(
    ("wait", "deadline", "now", "expected"),
    [(15, None, 100.0, 15), (15, 200.0, 100.0, 15), (15, 104.2, 100.0, 5), (15, 99.0, 100.0, 1)],
)
def test_bounded_wait(wait, deadline, now, expected):
    assert job.bounded_wait(wait, deadline, now) == expected
