# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The job module's supervisor program, run on its own in a job directory: the command it starts reacts to a
forwarded SIGINT even when the supervisor was started with SIGINT and SIGHUP ignored (as from `cmd &` in a
script, or under nohup)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

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


def test_the_command_gets_default_signals_though_the_supervisor_ignores_some(tmp_path):
    job_dir = str(tmp_path)
    supervisor = os.path.join(job_dir, job.SUPERVISOR_NAME)
    with open(supervisor, "w") as handle:
        handle.write(job.SUPERVISOR_SOURCE)
    report = os.path.join(job_dir, "ignored.json")
    # The command records which signals it ignores, then sleeps until a signal ends it.
    script = (
        "import json, signal, sys, time; "
        "names = ('SIGINT', 'SIGTERM', 'SIGQUIT', 'SIGHUP'); "
        "ignored = [n for n in names if signal.getsignal(getattr(signal, n)) == signal.SIG_IGN]; "
        "open(sys.argv[1], 'w').write(json.dumps(ignored)); "
        "time.sleep(60)"
    )
    config = {"argv": [sys.executable, "-c", script, report], "chdir": job_dir, "telemetry_interval": 5.0}
    with open(os.path.join(job_dir, job.COMMAND_NAME), "w") as handle:
        json.dump(config, handle)
    os.mkfifo(os.path.join(job_dir, job.ENV_FIFO_NAME), 0o600)
    process = subprocess.Popen(
        [sys.executable, "-c", IGNORING, sys.executable, supervisor, job_dir], start_new_session=True
    )
    pid = None
    try:
        with open(os.path.join(job_dir, job.ENV_FIFO_NAME), "wb") as fifo:
            fifo.write(json.dumps(dict(os.environ)).encode("utf-8"))
        pid = int(wait_for(os.path.join(job_dir, job.JOB_PID_NAME)))
        wait_for(report)
        with open(report) as handle:
            assert json.load(handle) == []
        # state=stopped with signal SIGINT reaches the supervisor, which forwards it to the command's group.
        os.kill(process.pid, signal.SIGINT)
        assert wait_for(os.path.join(job_dir, job.JOB_EXIT_CODE_NAME)) == "130"
        assert wait_for(os.path.join(job_dir, job.EXIT_SIGNAL_NAME)) == "SIGINT"
        assert process.wait(timeout=20) == 0
    finally:
        for target, killer in ((pid, os.killpg), (process.pid, os.kill)):
            if target:
                with contextlib.suppress(OSError):
                    killer(target, signal.SIGKILL)
        process.wait(timeout=20)
