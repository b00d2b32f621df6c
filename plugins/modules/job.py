#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: job
short_description: Start, watch and stop a detached job on the target host (a pod), with its exit code and telemetry
version_added: 0.1.0
description:
  - Runs a command on the target host detached from the SSH session, in its own session (a C(tmux) session when
    C(tmux) is installed, else C(setsid)), under a small supervisor program that this module writes into the job
    directory. The supervisor needs only Python 3 on the host, not Ansible.
  - The job directory is C(<durable_root>/trainops/<run_id>/job/<name>/) (see docs/jobs.md). It holds C(pid) (the
    command's pid), C(output.log) (stdout and stderr combined), C(started_at) and C(ended_at) (UTC, RFC 3339),
    C(exit_code) (written atomically by the supervisor when the command ends, apart from the log) and
    C(telemetry.jsonl) (one sample every O(telemetry_interval) seconds of the process tree's RSS and CPU, and of
    each GPU's memory and utilisation when C(nvidia-smi) is on the PATH).
  - A command killed by a signal gets the shell's exit code C(128 + signal number) (137 for C(SIGKILL), 143 for
    C(SIGTERM)); the signal's name is written to C(exit_signal) and returned in RV(exit_signal).
  - The command starts with C(SIGINT), C(SIGTERM), C(SIGQUIT) and C(SIGHUP) at their default dispositions, even
    when the module ran in a process that ignores them (started with C(&) from a script, or under C(nohup)).
  - O(state=started) on a job whose process is alive attaches to it (C(changed=false)); never a second copy, even
    when several controllers race (the check and the start happen under an C(flock) on the job directory's
    C(.lock)). A job that has ended is started again only with O(restart=true), after its files are moved to
    C(previous/<n>/) in the job directory (kept, never deleted).
  - O(state=status) reports V(running), V(exited) (with RV(exit_code)), V(lost) (no live process and no exit code;
    the result is unknown, RV(result_known=false)) or V(absent) (never started).
  - O(state=stopped) sends C(SIGTERM) to the job's process group, waits up to O(grace) seconds, then sends
    C(SIGKILL); with O(signal) it sends only that signal.
  - The job's outcome never fails the module by itself (an exit code of 3 or a lost job is reported, not raised);
    use C(failed_when) on RV(exit_code) or RV(result_known).
author:
  - trainops.gpu maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - In check mode nothing is started, signalled, moved or written; C(changed) says whether something would be.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  name:
    description:
      - Name of the job (letters, digits, C(.), C(_), C(-); starting with a letter or digit).
    type: str
    required: true
  run_id:
    description:
      - The run the job belongs to. With O(durable_root) it places the job in
        C(<durable_root>/trainops/<run_id>/job/<name>/).
      - Required unless O(job_dir) is given.
    type: str
  durable_root:
    description:
      - The pod's durable root (a network volume or the persistent mount). Required unless O(job_dir) is given.
    type: path
  job_dir:
    description:
      - An explicit job directory, instead of O(durable_root) and O(run_id).
    type: path
  command:
    description:
      - The command. A list is run as it is (no shell); a string is run with C(/bin/sh -c).
      - Required to start a job. When attaching to a running job that was started with another command, the
        module warns and attaches anyway.
    type: raw
  chdir:
    description:
      - Working directory of the command. Defaults to the run directory (C(<durable_root>/trainops/<run_id>)), or
        to O(job_dir) when that is given. It must exist.
    type: path
  env:
    description:
      - Environment variables added to the command's environment (which is otherwise the SSH session's).
      - The values are handed to the supervisor through a FIFO and never written to a file. Values of names that
        contain C(KEY), C(TOKEN), C(SECRET), C(PASSWORD), C(PASSWD) or C(CREDENTIAL) are masked in the module's
        output and logs, as with C(no_log).
    type: dict
    default: {}
  state:
    description:
      - V(started) starts the job, or attaches to it when it runs. V(status) only reports. V(stopped) stops it.
    type: str
    choices: [started, status, stopped]
    default: started
  restart:
    description:
      - With O(state=started), start a job again that has ended (exited or lost). Its files are moved to
        C(previous/<n>/) in the job directory first. Without it, starting an ended job fails, changing nothing.
      - A running job is attached to whatever this says.
    type: bool
    default: false
  wait:
    description:
      - Seconds to wait for the job to end (with O(state=started) or O(state=status)), at most 21600 (6 h).
        The module returns as soon as the job ends; V(0) does not wait. A job still running when the wait
        expires is reported as running with RV(wait_expired=true), not as a failure.
    type: int
    default: 0
  wait_deadline:
    description:
      - With O(wait), never wait past this moment (seconds since the epoch, UTC), and at least 1 s; a caller that
        repeats a bounded wait (C(until:)/C(retries:) with the same arguments) keeps one overall deadline.
      - Unset, the wait is O(wait) seconds.
    type: float
  signal:
    description:
      - With O(state=stopped), send only this signal (e.g. V(SIGTERM), V(SIGKILL), V(SIGINT), V(SIGUSR1);
        with or without the C(SIG) prefix) to the job's process group, with no escalation, then wait up to
        O(grace) seconds for the job to end.
    type: str
  grace:
    description:
      - With O(state=stopped) and no O(signal), seconds between C(SIGTERM) and C(SIGKILL); with O(signal), seconds
        to wait for the job to end after the signal. At most 3600.
    type: int
    default: 30
  telemetry_interval:
    description:
      - Seconds between telemetry samples, from 0.5 to 3600.
    type: float
    default: 3.0
  tail_lines:
    description:
      - How many of the last lines of C(output.log) to return in RV(output_tail) (at most 1000, from the last 64 KiB).
    type: int
    default: 20
  launcher:
    description:
      - How the supervisor is detached from the SSH session. V(auto) uses C(tmux new-session -d) when C(tmux) is on
        the PATH, else C(setsid).
    type: str
    choices: [auto, tmux, setsid]
    default: auto
  python:
    description:
      - Python 3 interpreter that runs the supervisor. Defaults to the interpreter running this module.
    type: path
notes:
  - Standard library only; runs on the pod through the usual module transport. Use pipelining
    (C(ANSIBLE_PIPELINING=true)) so that the module's arguments, including O(env), are not written to a
    temporary file on the pod.
  - Liveness is judged from C(/proc) (pid and process start time, so that a recycled pid is never taken for
    the job); a zombie counts as dead.
seealso:
  - name: trainops jobs
    description: The job directory, statuses and examples (docs/jobs.md in the collection).
    link: https://example.invalid/trainops/gpu/docs/jobs.md
"""

EXAMPLES = r"""
- name: Start the training job (or attach to it when it runs)
  trainops.gpu.job:
    name: train
    run_id: run42
    durable_root: /workspace
    chdir: /workspace/trainops/run42/src
    command: [python3, -m, trainops_train.train, --config, config.yaml]
    env:
      HF_HOME: /workspace/cache/hf
      HF_TOKEN: "{{ hf_token }}"  # masked in the output, never written to the job directory
  register: train

- name: Wait for it, up to an hour (the module returns as soon as it ends)
  trainops.gpu.job:
    name: train
    run_id: run42
    durable_root: /workspace
    state: status
    wait: 3600
  register: train
  failed_when: train.state == 'exited' and train.exit_code not in [0, 75]

- name: A lost job has no known result
  ansible.builtin.assert:
    that: train.result_known
    fail_msg: "job {{ train.name }} is {{ train.state }}: its result is unknown"

- name: Stop it (SIGTERM, SIGKILL after 60 s)
  trainops.gpu.job:
    name: train
    run_id: run42
    durable_root: /workspace
    state: stopped
    grace: 60

- name: Run it again after it ended (the previous files are kept in previous/<n>/)
  trainops.gpu.job:
    name: train
    run_id: run42
    durable_root: /workspace
    command: python3 -m trainops_train.train --config config.yaml >> extra.log
    restart: true
"""

RETURN = r"""
name:
  description: The job's name.
  returned: always
  type: str
  sample: train
job_dir:
  description: The job directory.
  returned: always
  type: str
  sample: /workspace/trainops/run42/job/train
state:
  description:
    - V(running), V(exited), V(lost) (no live process and no exit code) or V(absent) (never started).
    - In check mode, after an action that would have been taken, the state before it.
  returned: always
  type: str
  sample: exited
result_known:
  description: Whether the job's outcome is known (true only for V(exited)).
  returned: always
  type: bool
  sample: true
exit_code:
  description: The command's exit code; 128 + the signal number when a signal killed it; null until it ends.
  returned: always
  type: int
  sample: 0
exit_signal:
  description: Name of the signal that killed the command (e.g. C(SIGKILL)); null otherwise.
  returned: always
  type: str
  sample: null
pid:
  description: The command's pid (the leader of its process group); null before it started.
  returned: always
  type: int
  sample: 4242
supervisor_pid:
  description: The supervisor's pid.
  returned: always
  type: int
  sample: 4240
launcher:
  description: How the job was detached (C(tmux) or C(setsid)).
  returned: always
  type: str
  sample: tmux
tmux_session:
  description: The tmux session running the supervisor, when the launcher is C(tmux).
  returned: always
  type: str
  sample: trainops-run42-train-1a2b3c4d
started_at:
  description: When the command started (UTC, RFC 3339).
  returned: always
  type: str
  sample: "2026-12-02T10:00:00.123+00:00"
ended_at:
  description: When the command ended (UTC, RFC 3339); null while it runs, and for a lost job.
  returned: always
  type: str
  sample: "2026-12-02T11:00:00.456+00:00"
command:
  description: The command the job runs (as recorded in C(command.json)); a string command is C([/bin/sh, -c, ...]).
  returned: always
  type: list
  elements: str
log:
  description: Path of C(output.log).
  returned: always
  type: str
output_tail:
  description: The last O(tail_lines) lines of C(output.log).
  returned: always
  type: list
  elements: str
telemetry:
  description: Path of C(telemetry.jsonl).
  returned: always
  type: str
telemetry_samples:
  description: Number of telemetry samples written so far.
  returned: always
  type: int
  sample: 1200
telemetry_last:
  description: The last telemetry sample; null before the first.
  returned: always
  type: dict
  sample:
    ts: "2026-12-02T10:00:03.001+00:00"
    elapsed_s: 3.0
    processes: 2
    rss_bytes: 104857600
    cpu_seconds: 2.9
    cpu_percent: 97.0
    gpus: [{"index": 0, "memory_used_mib": 40000, "memory_total_mib": 81559, "utilization_percent": 98}]
result_status:
  description:
    - The C(status) of the run's C(logs/result.json) (e.g. C(finished), C(interrupted)) when the job has ended and
      that file was written after the job started; null otherwise.
  returned: always
  type: str
  sample: interrupted
result:
  description: The content of that C(result.json); null when RV(result_status) is.
  returned: always
  type: dict
run_status:
  description:
    - The run's status, from the one definition of exit statuses (C(run_layout)), for callers that judge the job
      as a training run (the train role). V(running), V(lost) and V(absent) as RV(state); for an exited job the
      RV(result_status) when it is one of V(finished), V(interrupted), V(refused), V(failed), else V(unknown)
      when a signal killed the command, else the exit code's status (0 V(finished), 75 V(interrupted),
      2 V(refused), anything else V(failed)).
  returned: always
  type: str
  sample: finished
layout:
  description:
    - The run directory's paths (C(run_layout)) when the job belongs to a run (O(durable_root) and O(run_id), or a
      O(job_dir) of the form C(<run_dir>/job/<name>)); null otherwise.
  returned: always
  type: dict
  contains:
    run_dir:
      description: The run directory.
      type: str
      sample: /workspace/trainops/run42
    src:
      description: The synced source (C(src/)).
      type: str
    ckpt:
      description: The checkpoint root (C(ckpt/)).
      type: str
    logs:
      description: The trainer's logs directory.
      type: str
    metrics:
      description: The per-step journal, C(logs/metrics.jsonl).
      type: str
      sample: /workspace/trainops/run42/logs/metrics.jsonl
    events:
      description: The trainer's events, C(logs/events.jsonl).
      type: str
    result:
      description: The trainer's C(logs/result.json).
      type: str
signals_sent:
  description: Signals this call sent (O(state=stopped); in check mode, the first it would send).
  returned: always
  type: list
  elements: str
  sample: [SIGTERM]
archived_to:
  description: Where the previous job's files were moved by O(restart=true); null otherwise.
  returned: always
  type: str
  sample: /workspace/trainops/run42/job/train/previous/1
wait_expired:
  description: Whether the job was still running when O(wait) (or O(grace)) ran out.
  returned: always
  type: bool
  sample: false
"""

import contextlib
import errno
import fcntl
import json
import math
import os
import re
import shlex
import shutil
import signal
import sys
import time
import uuid

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.trainops.gpu.plugins.module_utils._run_layout import (
    JOB_ENDED_AT_NAME,
    JOB_EXIT_CODE_NAME,
    JOB_OUTPUT_NAME,
    JOB_PID_NAME,
    JOB_STARTED_AT_NAME,
    JOB_TELEMETRY_NAME,
    STATUS_FAILED,
    STATUS_FINISHED,
    STATUS_INTERRUPTED,
    STATUS_REFUSED,
    RunLayout,
    status_for_exit,
)

# The supervisor (module_utils/_job_supervisor.py) runs on its own: _launch writes its source to
# <job_dir>/supervisor.py and starts `python3 supervisor.py <job_dir>` detached.
from ansible_collections.trainops.gpu.plugins.module_utils._job_supervisor import (
    COMMAND_NAME,
    ENV_FIFO_NAME,
    EXIT_SIGNAL_NAME,
    SUPERVISOR_LOG_NAME,
    SUPERVISOR_STATE_NAME,
    write_atomic,
)
from ansible_collections.trainops.gpu.plugins.module_utils._job_supervisor import (
    source as supervisor_source,
)

# The job directory's files besides the shared layout's (run_layout.JOB_FILE_NAMES) and the supervisor's.
LOCK_NAME = ".lock"
SUPERVISOR_NAME = "supervisor.py"
PREVIOUS_DIRNAME = "previous"

MAX_WAIT = 6 * 3600
MAX_GRACE = 3600
LOCK_TIMEOUT = 60.0
HANDOVER_TIMEOUT = 30.0
POLL = 0.25
TAIL_BYTES = 64 * 1024
RESULT_MAX_BYTES = 256 * 1024
RESULT_STATUSES = (STATUS_FINISHED, STATUS_INTERRUPTED, STATUS_REFUSED, STATUS_FAILED)
STATUS_UNKNOWN = "unknown"  # killed by a signal before the trainer recorded its outcome
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
SECRET_NAME_RE = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _read_text(path, limit=4096):
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", "replace").strip()
    except (OSError, IOError):
        return None


def _read_int(path):
    text = _read_text(path)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _read_json(path, limit=65536):
    text = _read_text(path, limit)
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _proc_alive(pid, ticks):
    """Whether pid is a live (not zombie) process that started at `ticks` (when known)."""
    if not pid:
        return False
    try:
        with open("/proc/%d/stat" % pid) as handle:
            data = handle.read()
    except (OSError, IOError):
        return False
    fields = data[data.rfind(")") + 2 :].split()
    if not fields or fields[0] in ("Z", "X"):
        return False
    if ticks is not None:
        try:
            return int(fields[19]) == int(ticks)
        except (IndexError, ValueError):
            return False
    return True


def _tail(path, lines):
    if lines <= 0:
        return []
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - TAIL_BYTES))
            data = handle.read(TAIL_BYTES)
    except (OSError, IOError):
        return []
    text = data.decode("utf-8", "replace")
    result = text.splitlines()
    if size > TAIL_BYTES and result:
        result = result[1:]  # the first line is probably cut
    return result[-lines:]


def _telemetry_summary(path):
    """(number of samples, last sample) of telemetry.jsonl."""
    count = 0
    last_line = b""
    try:
        with open(path, "rb") as handle:
            while True:
                block = handle.read(1024 * 1024)
                if not block:
                    break
                count += block.count(b"\n")
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 65536))
            tail = handle.read().splitlines()
            last_line = tail[-1] if tail else b""
    except (OSError, IOError):
        return 0, None
    try:
        last = json.loads(last_line.decode("utf-8", "replace")) if last_line else None
    except ValueError:
        last = None
    return count, last


class Job(object):
    def __init__(self, job_dir, run_dir):
        self.job_dir = job_dir
        self.run_dir = run_dir

    def path(self, name):
        return os.path.join(self.job_dir, name)

    def read(self, tail_lines=20):
        """The job's state from its files and /proc."""
        sup = _read_json(self.path(SUPERVISOR_STATE_NAME)) or {}
        command = _read_json(self.path(COMMAND_NAME)) or {}
        pid = _read_int(self.path(JOB_PID_NAME))
        exit_code = _read_int(self.path(JOB_EXIT_CODE_NAME))
        started_at = _read_text(self.path(JOB_STARTED_AT_NAME))
        info = {
            "name": os.path.basename(self.job_dir),
            "job_dir": self.job_dir,
            "pid": pid if pid is not None else sup.get("command_pid"),
            "supervisor_pid": sup.get("supervisor_pid"),
            "launcher": command.get("launcher"),
            "tmux_session": command.get("tmux_session"),
            "command": command.get("argv"),
            "started_at": started_at,
            "ended_at": _read_text(self.path(JOB_ENDED_AT_NAME)),
            "exit_code": exit_code,
            "exit_signal": _read_text(self.path(EXIT_SIGNAL_NAME)) or None,
            "log": self.path(JOB_OUTPUT_NAME),
            "telemetry": self.path(JOB_TELEMETRY_NAME),
            "result_status": None,
            "result": None,
        }
        if exit_code is not None:
            state = "exited"
        elif _proc_alive(info["pid"], sup.get("command_start_ticks")) or _proc_alive(
            sup.get("supervisor_pid"), sup.get("supervisor_start_ticks")
        ):
            state = "running"
        elif pid is None and started_at is None:
            state = "absent"
        else:
            state = "lost"
        info["state"] = state
        info["result_known"] = state == "exited"
        info["telemetry_samples"], info["telemetry_last"] = _telemetry_summary(info["telemetry"])
        info["output_tail"] = _tail(info["log"], tail_lines)
        if state in ("exited", "lost") and self.run_dir:
            self._add_result(info, sup.get("started_epoch"))
        info["run_status"] = run_status(info)
        info["layout"] = layout_paths(self.run_dir)
        return info

    def _add_result(self, info, started_epoch):
        result_path = RunLayout.from_run_dir(self.run_dir).result
        try:
            mtime = os.stat(result_path).st_mtime
        except OSError:
            return
        if started_epoch is not None and mtime + 1.0 < float(started_epoch):
            return  # an earlier life's result, not this job's
        result = _read_json(result_path, RESULT_MAX_BYTES)
        if isinstance(result, dict):
            info["result"] = result
            status = result.get("status")
            info["result_status"] = status if isinstance(status, str) else None

    def exists(self):
        return os.path.isdir(self.job_dir)


def run_status(info):
    """The run's status for a job's state (`info` as Job.read returns it): the state while it runs, is lost or
    absent; for an exited job result.json's status, else unknown when a signal killed it, else its exit code's."""
    if info["state"] != "exited":
        return info["state"]
    if info.get("result_status") in RESULT_STATUSES:
        return info["result_status"]
    if info.get("exit_signal"):
        return STATUS_UNKNOWN
    return status_for_exit(info["exit_code"])


def layout_paths(run_dir):
    """The run directory's paths by the run layout, or None without a run directory."""
    if not run_dir:
        return None
    layout = RunLayout.from_run_dir(run_dir)
    return {
        "run_dir": layout.run_dir,
        "src": layout.src,
        "ckpt": layout.ckpt,
        "logs": layout.logs,
        "metrics": layout.metrics,
        "events": layout.events,
        "result": layout.result,
    }


class Lock(object):
    """flock on <job_dir>/.lock, bounded."""

    def __init__(self, module, path, timeout=LOCK_TIMEOUT):
        self.module = module
        self.path = path
        self.timeout = timeout
        self.fd = None

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except (OSError, IOError) as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if time.monotonic() > deadline:
                os.close(self.fd)
                self.fd = None
                self.module.fail_json(
                    msg="another controller has held %s for %d s; nothing was done" % (self.path, self.timeout)
                )
            time.sleep(0.1)

    def __exit__(self, *exc):
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
        return False


def _signal_number(module, name):
    text = name.strip().upper()
    if text.isdigit():
        module.fail_json(msg="signal must be a name such as SIGTERM or SIGKILL, got %r" % name)
    if not text.startswith("SIG"):
        text = "SIG" + text
    try:
        return getattr(signal, text), text
    except AttributeError:
        module.fail_json(msg="unknown signal %r" % name)


def _wait_end(job, seconds, tail_lines):
    """Poll (not busily) until the job is no longer running or `seconds` pass; (info, expired)."""
    deadline = time.monotonic() + seconds
    info = job.read(tail_lines)
    while info["state"] == "running" and time.monotonic() < deadline:
        step_deadline = min(deadline, time.monotonic() + 2.0)
        while time.monotonic() < step_deadline and not os.path.exists(job.path(JOB_EXIT_CODE_NAME)):
            time.sleep(POLL)
        info = job.read(tail_lines)
    return info, info["state"] == "running"


def _archive(job):
    """Move the ended job's files (all but the lock and earlier archives) into previous/<n>/."""
    previous = job.path(PREVIOUS_DIRNAME)
    if not os.path.isdir(previous):
        os.mkdir(previous, 0o755)
    numbers = [int(n) for n in os.listdir(previous) if n.isdigit()]
    target = os.path.join(previous, str(max(numbers) + 1 if numbers else 1))
    os.mkdir(target, 0o755)
    for entry in sorted(os.listdir(job.job_dir)):
        if entry in (LOCK_NAME, PREVIOUS_DIRNAME):
            continue
        os.rename(job.path(entry), os.path.join(target, entry))
    return target


def _command_argv(module, command):
    if isinstance(command, str):
        if not command.strip():
            module.fail_json(msg="command must not be empty")
        return ["/bin/sh", "-c", command]
    if isinstance(command, (list, tuple)) and command:
        if not all(isinstance(arg, (str, int, float)) and not isinstance(arg, bool) for arg in command):
            module.fail_json(msg="command must be a string or a list of strings")
        return [str(arg) for arg in command]
    module.fail_json(msg="command must be a non-empty string or list of strings, got %r" % (command,))


def _tmux_session_name(run_id, name):
    base = re.sub(r"[^A-Za-z0-9_-]", "_", "trainops-%s-%s" % (run_id or "job", name))[:80]
    return "%s-%s" % (base, uuid.uuid4().hex[:8])


def _launch(module, job, argv, chdir, env, launcher, python, interval, run_id):
    """Write the supervisor and its config, start it detached, hand it the environment, wait for its pid."""
    tmux = shutil.which("tmux")
    if launcher == "auto":
        launcher = "tmux" if tmux else "setsid"
    if launcher == "tmux" and not tmux:
        module.fail_json(msg="launcher=tmux, but tmux is not on the PATH")
    session = _tmux_session_name(run_id, os.path.basename(job.job_dir)) if launcher == "tmux" else None
    write_atomic(job.job_dir, SUPERVISOR_NAME, supervisor_source())
    config = {
        "argv": argv,
        "chdir": chdir,
        "env_names": sorted(env),
        "telemetry_interval": interval,
        "launcher": launcher,
        "tmux_session": session,
        "python": python,
    }
    write_atomic(job.job_dir, COMMAND_NAME, json.dumps(config, indent=2, sort_keys=True) + "\n")
    fifo = _make_env_fifo(job)
    full_env = dict(os.environ)
    full_env.update(env)
    payload = json.dumps(full_env).encode("utf-8")
    supervisor = [python, job.path(SUPERVISOR_NAME), job.job_dir]
    supervisor_pid = _start_supervisor(module, job, supervisor, tmux, session)
    _hand_over_env(module, job, fifo, payload, supervisor_pid, session)
    # Wait until the command runs (pid) or could not start (exit_code).
    deadline = time.monotonic() + HANDOVER_TIMEOUT
    while not (os.path.exists(job.path(JOB_PID_NAME)) or os.path.exists(job.path(JOB_EXIT_CODE_NAME))):
        _check_handover(module, job, deadline, supervisor_pid, session, "start the command")
        time.sleep(0.02)


def _make_env_fifo(job):
    """Create a fresh env.fifo (removing it and supervisor.json when a start that failed left them); its path."""
    fifo = job.path(ENV_FIFO_NAME)
    for stale in (fifo, job.path(SUPERVISOR_STATE_NAME)):  # left by a start that failed
        if os.path.lexists(stale):
            os.unlink(stale)
    os.mkfifo(fifo, 0o600)
    return fifo


def _start_supervisor(module, job, supervisor, tmux, session):
    """Start the supervisor detached: in the tmux session when there is one, else under setsid. Its pid when
    it is our child (setsid), else None."""
    if session is None:
        return _spawn_detached(supervisor)
    line = "exec " + " ".join(shlex.quote(arg) for arg in supervisor)
    rc, out, err = module.run_command([tmux, "new-session", "-d", "-s", session, line], cwd="/")
    if rc != 0:
        _abandon(module, job, None, session)
        module.fail_json(msg="tmux new-session failed (rc=%d): %s" % (rc, (out + err).strip()))
    return None


def _hand_over_env(module, job, fifo, payload, supervisor_pid, session):
    """Hand the environment over through the FIFO: nothing of it reaches the disk."""
    deadline = time.monotonic() + HANDOVER_TIMEOUT
    fd = None
    while fd is None:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
            _check_handover(module, job, deadline, supervisor_pid, session, "take its environment")
            time.sleep(0.02)
    try:
        os.set_blocking(fd, True)
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _check_handover(module, job, deadline, supervisor_pid, session, what):
    """While starting: when the deadline has passed or the supervisor has ended, abandon the start and fail."""
    if time.monotonic() > deadline or _exited(supervisor_pid) or _supervisor_died(job):
        _abandon(module, job, supervisor_pid, session)
        module.fail_json(
            msg="the supervisor ended or did not %s within %d s" % (what, HANDOVER_TIMEOUT),
            supervisor_log=_tail(job.path(SUPERVISOR_LOG_NAME), 40),
        )


def _spawn_detached(argv):
    """Start argv in a new session, stdin/stdout/stderr on /dev/null, no other descriptors; its pid."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.setsid()
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.closerange(3, 65536)
            os.chdir("/")
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    return pid


def _supervisor_died(job):
    """Whether the supervisor that recorded itself in supervisor.json is gone."""
    sup = _read_json(job.path(SUPERVISOR_STATE_NAME))
    if not isinstance(sup, dict) or not sup.get("supervisor_pid"):
        return False
    return not _proc_alive(sup["supervisor_pid"], sup.get("supervisor_start_ticks"))


def _exited(pid):
    """Whether our child `pid` has ended (reaping it); False for None."""
    if pid is None:
        return False
    try:
        waited, _status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return waited == pid


def _abandon(module, job, supervisor_pid, session):
    """After a failed start: end the supervisor we started, if any, and remove the FIFO."""
    if supervisor_pid is not None and not _exited(supervisor_pid):
        with contextlib.suppress(OSError):
            os.kill(supervisor_pid, signal.SIGKILL)
    if session:
        tmux = shutil.which("tmux")
        if tmux:
            module.run_command([tmux, "kill-session", "-t", session])
    with contextlib.suppress(OSError):
        os.unlink(job.path(ENV_FIFO_NAME))


def _signal_job(job, info, signum):
    """Signal the job's process group, only while its leader is the process the supervisor started (not a
    recycled pid); False when it is gone."""
    sup = _read_json(job.path(SUPERVISOR_STATE_NAME)) or {}
    pid = info["pid"]
    if not pid or not _proc_alive(pid, sup.get("command_start_ticks")):
        return False
    try:
        os.killpg(pid, signum)
        return True
    except OSError:
        return False


def _resolve_paths(module):
    params = module.params
    name = params["name"]
    if not NAME_RE.match(name or ""):
        module.fail_json(
            msg="name must be letters, digits, '.', '_' or '-', starting with a letter or digit: %r" % name
        )
    if params["job_dir"]:
        if params["durable_root"] or params["run_id"]:
            module.fail_json(msg="job_dir excludes durable_root and run_id")
        job_dir = os.path.abspath(params["job_dir"])
        parent = os.path.dirname(job_dir)
        run_dir = os.path.dirname(parent) if os.path.basename(parent) == "job" else None
        return job_dir, run_dir, job_dir
    if not (params["durable_root"] and params["run_id"]):
        module.fail_json(msg="give durable_root and run_id, or job_dir")
    try:
        layout = RunLayout.for_run(os.path.abspath(params["durable_root"]), params["run_id"])
        job_dir = layout.job_dir(name)
    except ValueError as exc:
        module.fail_json(msg=to_native(exc))
    return job_dir, layout.run_dir, layout.run_dir


def _validate_env(module, env):
    clean = {}
    for key, value in (env or {}).items():
        if not isinstance(key, str) or not ENV_NAME_RE.match(key):
            module.fail_json(msg="env: %r is not a valid variable name" % (key,))
        if value is None or isinstance(value, (dict, list)):
            module.fail_json(msg="env: %s must be a string, number or boolean" % key)
        clean[key] = to_native(value) if not isinstance(value, bool) else ("true" if value else "false")
        if "\0" in clean[key]:
            module.fail_json(msg="env: %s contains a NUL byte" % key)
    return clean


def main():
    module = AnsibleModule(argument_spec=_argument_spec(), supports_check_mode=True)
    env, signum = _check_params(module)
    job_dir, run_dir, default_chdir = _resolve_paths(module)
    job = Job(job_dir, run_dir)
    result = dict(changed=False, signals_sent=[], archived_to=None, wait_expired=False)
    state = module.params["state"]
    if state == "status":
        _status(module, job, result)
    elif state == "stopped":
        _stop(module, job, result, signum)
    else:
        _start(module, job, result, env, default_chdir)


def _argument_spec():
    return dict(
        name=dict(type="str", required=True),
        run_id=dict(type="str"),
        durable_root=dict(type="path"),
        job_dir=dict(type="path"),
        command=dict(type="raw"),
        chdir=dict(type="path"),
        env=dict(type="dict", default={}),
        state=dict(type="str", choices=["started", "status", "stopped"], default="started"),
        restart=dict(type="bool", default=False),
        wait=dict(type="int", default=0),
        wait_deadline=dict(type="float"),
        signal=dict(type="str"),
        grace=dict(type="int", default=30),
        telemetry_interval=dict(type="float", default=3.0),
        tail_lines=dict(type="int", default=20),
        launcher=dict(type="str", choices=["auto", "tmux", "setsid"], default="auto"),
        python=dict(type="path"),
    )


def _check_params(module):
    """Mask the secret env values, check the parameters' ranges; (env as strings, (signum, name) or None)."""
    params = module.params
    env = params["env"] or {}
    for key, value in env.items():
        if isinstance(key, str) and SECRET_NAME_RE.search(key) and value not in (None, ""):
            module.no_log_values.add(to_native(value))
    env = _validate_env(module, env)
    if not 0 <= params["wait"] <= MAX_WAIT:
        module.fail_json(msg="wait must be from 0 to %d seconds, got %d" % (MAX_WAIT, params["wait"]))
    if not 0 <= params["grace"] <= MAX_GRACE:
        module.fail_json(msg="grace must be from 0 to %d seconds, got %d" % (MAX_GRACE, params["grace"]))
    if not 0.5 <= params["telemetry_interval"] <= 3600:
        module.fail_json(msg="telemetry_interval must be from 0.5 to 3600 seconds")
    if not 0 <= params["tail_lines"] <= 1000:
        module.fail_json(msg="tail_lines must be from 0 to 1000")
    if params["signal"] is not None and params["state"] != "stopped":
        module.fail_json(msg="signal is only for state=stopped")
    signum = _signal_number(module, params["signal"]) if params["signal"] is not None else None
    return env, signum


def _read_or_wait(job, wait, tail_lines, deadline=None):
    """(info, wait expired): after waiting up to `wait` seconds (no later than `deadline`, epoch seconds, but at
    least 1 s) for the job to end, or at once for 0."""
    if wait:
        return _wait_end(job, bounded_wait(wait, deadline, time.time()), tail_lines)
    return job.read(tail_lines), False


def bounded_wait(wait, deadline, now):
    """`wait` seconds, cut to the whole seconds left until `deadline` (epoch seconds) when given, at least 1."""
    if deadline is None:
        return wait
    return max(min(wait, math.ceil(deadline - now)), 1)


def _status(module, job, result):
    params = module.params
    info, expired = _read_or_wait(job, params["wait"], params["tail_lines"], params["wait_deadline"])
    result.update(info, wait_expired=expired)
    module.exit_json(**result)


def _stop(module, job, result, signum):
    """state=stopped: the signal (SIGTERM, then SIGKILL after grace unless `signum` is given), then the result."""
    name, tail_lines = module.params["name"], module.params["tail_lines"]
    info = job.read(tail_lines)
    if info["state"] != "running":
        result.update(info)
        module.exit_json(msg="job %s is %s: nothing to stop" % (name, info["state"]), **result)
    first = signum if signum is not None else (signal.SIGTERM, "SIGTERM")
    if module.check_mode:
        result.update(info, changed=True, signals_sent=[first[1]])
        module.exit_json(msg="would send %s to job %s" % (first[1], name), **result)
    sent = []
    _signal_locked(module, job, tail_lines, first, sent)
    info, expired = _wait_end(job, module.params["grace"], tail_lines)
    if expired and signum is None:
        _signal_locked(module, job, tail_lines, (signal.SIGKILL, "SIGKILL"), sent)
        info, expired = _wait_end(job, 30, tail_lines)
    result.update(info, changed=bool(sent), signals_sent=sent, wait_expired=expired)
    module.exit_json(**result)


def _signal_locked(module, job, tail_lines, signum, sent):
    """Under the lock, send signum = (number, name) to the job while it runs; append the name to `sent` if sent."""
    with Lock(module, job.path(LOCK_NAME)):
        info = job.read(tail_lines)
        if info["state"] == "running" and info["pid"] and _signal_job(job, info, signum[0]):
            sent.append(signum[1])


def _start(module, job, result, env, default_chdir):
    """state=started: attach to the running job, or start it (restarting an ended one with restart=true)."""
    params = module.params
    argv, chdir, python = _start_args(module, default_chdir)
    info = job.read(params["tail_lines"])
    if module.check_mode:
        _start_check_mode(module, info, argv, result)
    try:
        os.makedirs(job.job_dir, 0o755, exist_ok=True)
    except OSError as exc:
        module.fail_json(msg="cannot create %s: %s" % (job.job_dir, to_native(exc)))
    changed = _start_or_attach(module, job, argv, chdir, env, python, result)
    info, expired = _read_or_wait(job, params["wait"], params["tail_lines"], params["wait_deadline"])
    result.update(info, changed=changed, wait_expired=expired)
    module.exit_json(**result)


def _start_args(module, default_chdir):
    """The command's argv, its working directory and the supervisor's python, checked."""
    params = module.params
    if params["command"] is None:
        module.fail_json(msg="state=started needs command")
    argv = _command_argv(module, params["command"])
    chdir = os.path.abspath(params["chdir"] or default_chdir)
    python = params["python"] or sys.executable
    if params["chdir"] and not os.path.isdir(chdir):
        module.fail_json(msg="chdir %s is not a directory" % chdir)
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        module.fail_json(msg="python %s is not an executable file" % python)
    return argv, chdir, python


def _start_check_mode(module, info, argv, result):
    """state=started in check mode: say what would be done (attach, refuse or start), changing nothing."""
    name = module.params["name"]
    if info["state"] == "running":
        _warn_if_other_command(module, info, argv)
        result.update(info)
        module.exit_json(msg="job %s runs: would attach" % name, **result)
    if info["state"] in ("exited", "lost") and not module.params["restart"]:
        _refuse(module, info, name)
    result.update(info, changed=True)
    module.exit_json(msg="would start job %s" % name, **result)


def _start_or_attach(module, job, argv, chdir, env, python, result):
    """Under the lock: attach to the running job, or archive an ended one (with restart) and launch; changed."""
    params = module.params
    with Lock(module, job.path(LOCK_NAME)):
        info = job.read(params["tail_lines"])
        if info["state"] == "running":
            _warn_if_other_command(module, info, argv)
            return False
        if not os.path.isdir(chdir):
            module.fail_json(msg="chdir %s is not a directory" % chdir)
        if info["state"] in ("exited", "lost"):
            if not params["restart"]:
                _refuse(module, info, params["name"])
            result["archived_to"] = _archive(job)
        _launch(
            module,
            job,
            argv,
            chdir,
            env,
            params["launcher"],
            python,
            params["telemetry_interval"],
            params["run_id"],
        )
        return True


def _warn_if_other_command(module, info, argv):
    if info.get("command") and info["command"] != argv:
        module.warn(
            "job %s runs %s, not the command given; attached to it" % (info["name"], json.dumps(info["command"]))
        )


def _refuse(module, info, name):
    how = "exited with %s" % info["exit_code"] if info["state"] == "exited" else "is lost (its result is unknown)"
    info = dict(info)
    info.pop("failed", None)
    module.fail_json(
        msg="job %s %s; set restart=true to start it again (its files are kept in previous/<n>/)" % (name, how), **info
    )


if __name__ == "__main__":
    main()
