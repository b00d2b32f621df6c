# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Runs on the pod on its own (Python >= 3.8, standard library only, no import of the collection): the job
# module writes this file's text to <job_dir>/supervisor.py and starts it detached. It keeps Python 3.8 idioms.
# ruff: noqa: UP004, UP009, UP031, RUF100
"""The job module's supervisor: ``python3 supervisor.py <job_dir>`` runs one job's command.

It reads ``command.json``, takes the environment from ``env.fifo`` (never from a file), starts the command in
its own session with stdout and stderr appended to ``output.log``, writes ``started_at``, ``supervisor.json``
and ``pid``, forwards SIGTERM and SIGINT to the command's process group, samples telemetry every interval into
``telemetry.jsonl``, and when the command ends writes ``ended_at``, ``exit_signal`` (when a signal killed it)
and last ``exit_code``, each atomically. Its own messages go to ``supervisor.log``.

The job module imports this file only to read its source (see ``source()``); importing it does nothing else.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import time

# The job directory's files this program reads and writes (the job module names the same files).
COMMAND_NAME = "command.json"
ENV_FIFO_NAME = "env.fifo"
SUPERVISOR_STATE_NAME = "supervisor.json"
SUPERVISOR_LOG_NAME = "supervisor.log"
OUTPUT_NAME = "output.log"
PID_NAME = "pid"
STARTED_AT_NAME = "started_at"
ENDED_AT_NAME = "ended_at"
EXIT_CODE_NAME = "exit_code"
EXIT_SIGNAL_NAME = "exit_signal"
TELEMETRY_NAME = "telemetry.jsonl"

ENV_TIMEOUT = 60  # seconds the module has to hand the environment over through env.fifo
NOT_FOUND_EXIT = 127  # the shell's codes for a command that could not be run
NOT_EXECUTABLE_EXIT = 126
LOST_CHILD_STATUS = 255 << 8  # waitpid status recorded when the child cannot be waited for

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

# The command starts with these at SIG_DFL whatever this supervisor inherited (SIGINT and SIGQUIT are ignored in
# anything started with `&` from a script, SIGHUP under nohup) or ignores itself (SIGHUP): it reacts to what
# state=stopped sends as it would when started from a shell.
DEFAULT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP)
# Signals the supervisor passes on to the command's process group (state=stopped sends them to it too).
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def source():
    """This file's text, as the job module writes it to the pod: from the module loader, so it works from the
    AnsiballZ zip (zipimport), with or without pipelining, as well as from a checkout."""
    spec = globals().get("__spec__")
    loader = getattr(spec, "loader", None) or globals().get("__loader__")
    text = None
    if loader is not None and hasattr(loader, "get_source"):
        text = loader.get_source(__name__)
    if text is None:
        with open(__file__, "rb") as handle:
            text = handle.read()
    if isinstance(text, bytes):  # Ansible's collection loader (controller side, ansible-test) returns bytes
        text = text.decode("utf-8")
    return text


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


def log(message):
    sys.stderr.write("%s supervisor[%d]: %s\n" % (now(), os.getpid(), message))
    sys.stderr.flush()


def write_atomic(job_dir, name, text):
    """Write <job_dir>/<name> through a temporary file, fsynced, renamed into place, the directory fsynced."""
    target = os.path.join(job_dir, name)
    tmp = "%s.tmp-%d" % (target, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, target)
    dfd = os.open(job_dir, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def stat_fields(pid):
    """The fields of /proc/<pid>/stat after the command name (state first)."""
    with open("/proc/%d/stat" % pid) as handle:
        data = handle.read()
    return data[data.rfind(")") + 2 :].split()


def start_ticks(pid):
    """The process's start time in clock ticks since boot (tells a recycled pid apart); None when gone."""
    try:
        return int(stat_fields(pid)[19])
    except (OSError, IndexError, ValueError):
        return None


def boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except OSError:
        return None


def tree_usage(root):
    """(processes, rss bytes, cpu seconds) of root and its descendants, from /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = stat_fields(int(entry))
            if fields[0] in ("Z", "X"):
                continue
            table[int(entry)] = (int(fields[1]), sum(int(v) for v in fields[11:15]), int(fields[21]))
        except (OSError, IndexError, ValueError):
            continue
    children = {}
    for pid, (ppid, _cpu, _rss) in table.items():
        children.setdefault(ppid, []).append(pid)
    seen, todo = set(), [root] if root in table else []
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        todo.extend(children.get(pid, ()))
    cpu = sum(table[p][1] for p in seen) / float(TICKS)
    rss = sum(table[p][2] for p in seen) * PAGE
    return len(seen), rss, cpu


def number(text):
    """An int, else a float, else None (nvidia-smi prints "[N/A]" for what it cannot read)."""
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return None


def gpu_sample(nvidia_smi):
    """([{index, memory_used_mib, memory_total_mib, utilization_percent}], error or None) from nvidia-smi."""
    try:
        done = subprocess.run(
            [
                nvidia_smi,
                "--query-gpu=index,memory.used,memory.total,utilization.gpu",
                "--format=csv,noheader,nounits",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return [], "%s: %s" % (type(exc).__name__, exc)
    text = done.stdout.decode("utf-8", "replace")
    if done.returncode != 0:
        return [], "nvidia-smi exited %d: %s" % (done.returncode, text.strip()[:200])
    gpus = []
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) != 4:
            continue
        index, used, total, util = (number(p) for p in parts)
        gpus.append({"index": index, "memory_used_mib": used, "memory_total_mib": total, "utilization_percent": util})
    return gpus, None


def exit_status(raw):
    """(exit code, signal name or None) of a waitpid status: a signal's death is 128 + its number, as in a shell."""
    if os.WIFSIGNALED(raw):
        signum = os.WTERMSIG(raw)
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = "SIG%d" % signum
        return 128 + signum, name
    return os.WEXITSTATUS(raw), None


def start_error_code(exc):
    """The shell's exit code for a command that could not be started: 127 not found, else 126."""
    return NOT_FOUND_EXIT if isinstance(exc, FileNotFoundError) else NOT_EXECUTABLE_EXIT


def default_signals():
    """In the command's process, before exec: DEFAULT_SIGNALS back to SIG_DFL."""
    for signum in DEFAULT_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)


def forwarder(pid):
    """A signal handler that passes the signal on to the process group `pid` leads."""

    def forward(signum, _frame):
        log("got %s: forwarding it to the job's process group" % signal.Signals(signum).name)
        with contextlib.suppress(OSError):
            os.killpg(pid, signum)

    return forward


def supervisor_state(command_pid=None, started_epoch=None, with_command=True):
    """supervisor.json's text: this process and (once known) the command, with their start times."""
    state = {"supervisor_pid": os.getpid(), "supervisor_start_ticks": start_ticks(os.getpid())}
    if with_command:
        state["command_pid"] = command_pid
        state["command_start_ticks"] = start_ticks(command_pid) if command_pid else None
    state["boot_id"] = boot_id()
    if with_command:
        state["started_epoch"] = started_epoch
    return json.dumps(state) + "\n"


class Telemetry(object):
    """Samples of the command's process tree (and GPUs, when nvidia-smi is there), one JSON line each."""

    def __init__(self, handle, pid, interval, started_mono, nvidia_smi):
        self.handle = handle
        self.pid = pid
        self.interval = interval
        self.started_mono = started_mono
        self.nvidia_smi = nvidia_smi
        self.next_sample = started_mono
        self.last_cpu, self.last_mono = 0.0, started_mono

    def due(self, mono):
        return mono >= self.next_sample

    def sample(self, mono):
        """Write one sample taken at monotonic time `mono`; schedule the next one; the sample."""
        ts = now()
        processes, rss, cpu = tree_usage(self.pid)
        elapsed = mono - self.last_mono
        sample = {
            "ts": ts,
            "elapsed_s": round(mono - self.started_mono, 3),
            "pid": self.pid,
            "processes": processes,
            "rss_bytes": rss,
            "cpu_seconds": round(cpu, 3),
            "cpu_percent": round(100.0 * max(cpu - self.last_cpu, 0.0) / elapsed, 1) if elapsed > 0 else 0.0,
        }
        self.last_cpu, self.last_mono = cpu, mono
        if self.nvidia_smi:
            gpus, error = gpu_sample(self.nvidia_smi)
            sample["gpus"] = gpus
            if error:
                sample["gpu_error"] = error
        self.handle.write(json.dumps(sample, sort_keys=True) + "\n")
        self.handle.flush()
        while self.next_sample <= time.monotonic():
            self.next_sample += self.interval
        return sample

    def pause(self):
        """Seconds to sleep before the next poll: up to 0.1, less when a sample is due sooner."""
        return max(0.01, min(0.1, self.next_sample - time.monotonic()))


def wait_child(pid, telemetry):
    """Poll the command until it ends, sampling telemetry meanwhile; its waitpid status."""
    while True:
        try:
            waited, raw = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            waited, raw = pid, LOST_CHILD_STATUS
        if waited == pid:
            return raw
        mono = time.monotonic()
        if telemetry.due(mono):
            telemetry.sample(mono)
        time.sleep(telemetry.pause())


def redirect_stdio(job_dir):
    """stdout and stderr to supervisor.log (appended), stdin from /dev/null."""
    log_fd = os.open(os.path.join(job_dir, SUPERVISOR_LOG_NAME), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log_fd, 2)
    os.dup2(log_fd, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)


def read_env(job_dir):
    """The command's environment, from the FIFO the module writes it to (bounded by ENV_TIMEOUT: SIGALRM)."""
    fifo_path = os.path.join(job_dir, ENV_FIFO_NAME)
    signal.alarm(ENV_TIMEOUT)
    with open(fifo_path, "rb") as fifo:
        env = json.loads(fifo.read().decode("utf-8"))
    signal.alarm(0)
    os.unlink(fifo_path)
    return env


def run(job_dir):
    """Supervise the job in `job_dir` (its stdio already redirected) until its command ends."""
    write_atomic(job_dir, SUPERVISOR_STATE_NAME, supervisor_state(with_command=False))
    with open(os.path.join(job_dir, COMMAND_NAME)) as handle:
        config = json.load(handle)
    env = read_env(job_dir)
    argv = config["argv"]
    output = os.open(os.path.join(job_dir, OUTPUT_NAME), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    write_atomic(job_dir, STARTED_AT_NAME, now() + "\n")
    started_mono = time.monotonic()
    started_wall = time.time()
    try:
        # The command must not keep this process's handlers or ignores: preexec_fn resets them before exec.
        child = subprocess.Popen(  # pylint: disable=consider-using-with,subprocess-popen-preexec-fn
            argv,
            cwd=config["chdir"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
            start_new_session=True,
            close_fds=True,
            preexec_fn=default_signals,
        )
    except OSError as exc:
        code = start_error_code(exc)
        os.write(output, ("trainops job: cannot run %r: %s\n" % (argv[0], exc)).encode("utf-8"))
        log("cannot start the command: %s; exit code %d" % (exc, code))
        write_atomic(job_dir, SUPERVISOR_STATE_NAME, supervisor_state(None, started_wall))
        write_atomic(job_dir, ENDED_AT_NAME, now() + "\n")
        write_atomic(job_dir, EXIT_CODE_NAME, "%d\n" % code)
        return code
    pid = child.pid
    # Forwarders first: a SIGTERM sent once the pid file is there (or earlier) must reach the command, never end
    # this process with its default action (the command left unsupervised, no exit code written).
    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forwarder(pid))
    os.close(output)
    write_atomic(job_dir, SUPERVISOR_STATE_NAME, supervisor_state(pid, started_wall))
    write_atomic(job_dir, PID_NAME, "%d\n" % pid)
    log("started pid %d: %r" % (pid, argv))

    nvidia_smi = shutil.which("nvidia-smi", path=env.get("PATH") or os.defpath)
    with open(os.path.join(job_dir, TELEMETRY_NAME), "a") as handle:
        telemetry = Telemetry(handle, pid, float(config["telemetry_interval"]), started_mono, nvidia_smi)
        status = wait_child(pid, telemetry)
    write_atomic(job_dir, ENDED_AT_NAME, now() + "\n")
    code, name = exit_status(status)
    if name is not None:
        write_atomic(job_dir, EXIT_SIGNAL_NAME, name + "\n")
        log("pid %d was killed by %s: exit code %d" % (pid, name, code))
    else:
        log("pid %d exited with %d" % (pid, code))
    write_atomic(job_dir, EXIT_CODE_NAME, "%d\n" % code)
    return code


def main(argv=None):
    argv = sys.argv if argv is None else argv
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    job_dir = argv[1]
    redirect_stdio(job_dir)
    run(job_dir)


if __name__ == "__main__":
    main()
