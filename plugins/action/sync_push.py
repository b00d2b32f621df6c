# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""sync_push: record the source, rsync exactly the recorded files to the pod, verify them there; one task.

Everything runs from the controller, in the worker that runs the task, over one SSH connection to the pod:

1. the SSH master connection is opened in the background (``ssh -f -N -o ControlMaster=yes``, a control
   socket in a private temporary directory) while the provenance is recorded in-process (the provenance
   module's code, with its hash cache);
2. rsync runs through it with exactly the recorded names and the quick check (size and mtime): an unchanged
   tree sends no file content; the destination directory is made by ``--rsync-path``;
3. meanwhile plugins/module_utils/_source_verify.py starts on the pod through the same connection, with the
   manifest on its standard input, loads its cache and waits; once rsync is done it is told ``go``: it keeps
   the manifest as ``<run>/source.sha256`` and checks every listed file by sha256 (reading only the files
   whose identity changed since its last check);
4. the master connection is closed (it would end by itself after ``ControlPersist`` idle seconds).

An SSH handshake costs about 0.2 s here, more than rsync's own work on an unchanged tree: the push makes one.
(Tried and measured slower here: rsync over its own connection started before the files are hashed, with
the master opened beside it; two handshakes at once on two cores cost more than the relay through the
master saves.)
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.trainops.gpu.plugins.module_utils import _source_verify
from ansible_collections.trainops.gpu.plugins.module_utils._provenance import (
    ProvenanceError,
    command_record,
    hash_cache_path,
    record,
    validate_run_id,
)

ARGUMENT_SPEC = {
    "src": {"type": "path", "required": True},
    "run_id": {"type": "str", "required": True},
    "runs_dir": {"type": "path", "required": True},
    "dest": {"type": "str", "required": True},
    "remote": {"type": "str", "required": True},
    "rsh": {"type": "str", "required": True},
    "command": {"type": "raw", "default": ["python", "-m", "trainops_train.train"]},
    "venv": {"type": "dict"},
    "archive": {"type": "str", "choices": ["auto", "always", "never"], "default": "auto"},
    "hash_cache": {"type": "bool", "default": True},
    "verify": {"type": "str", "choices": ["cached", "full"], "default": "cached"},
    "python": {"type": "str", "default": "python3"},
    "rsync_timeout": {"type": "int", "default": 300},
    "verify_timeout": {"type": "int", "default": 600},
    "connect_timeout": {"type": "int", "default": 60},
}
# Content moved: a regular file sent, or a link or directory created. A directory's mtime alone is not.
CONTENT_MOVED = re.compile(r"^(<f|>f|cL|cd|hf)")
CONTROL_PERSIST_S = 60
# Bytes of paths (and their argv pointers) given to one rsync: well under ARG_MAX (2 MiB on Linux, with the
# environment counted in it).
ARGS_BYTES = 512 * 1024
TRANSFERRED = re.compile(r"Number of regular files transferred: ([0-9,]+)")
TRANSFERRED_BYTES = re.compile(r"Total transferred file size: ([0-9,]+)")


def _stat_number(pattern, text):
    found = pattern.search(text)
    return int(found.group(1).replace(",", "")) if found else 0


def _batches(paths, limit=ARGS_BYTES):
    """``paths`` cut into lists whose arguments stay under ``limit`` bytes (the kernel's limit is larger)."""
    batch, size = [], 0
    for path in paths:
        cost = len(path.encode("utf-8", "surrogateescape")) + 1 + 8
        if batch and size + cost > limit:
            yield batch
            batch, size = [], 0
        batch.append(path)
        size += cost
    if batch:
        yield batch


def _tail(text, limit=2000):
    text = (text or "").strip()
    return text if len(text) <= limit else "..." + text[-limit:]


class _Connection:
    """One SSH master connection to the pod; ``rsh()`` and ``popen()`` go through it."""

    def __init__(self, rsh, remote, connect_timeout):
        words = shlex.split(rsh)
        if not words:
            raise AnsibleActionFail("sync_push: rsh is empty")
        # ssh takes the first value given for an option: ours go before the caller's.
        self.program, self.options = words[0], words[1:]
        self.host = remote.replace("[", "").replace("]", "")
        # A short path: a control socket's path must fit in 104 bytes (macOS's $TMPDIR alone is near 50).
        self.directory = tempfile.mkdtemp(prefix="trainops-ssh-", dir="/tmp" if os.path.isdir("/tmp") else None)
        self.socket = os.path.join(self.directory, "cm")
        self.timeout = connect_timeout
        self.master = None
        self.log_path = os.path.join(self.directory, "master.log")

    def _argv(self, *extra):
        return [self.program, "-o", "ControlPath=" + self.socket, *extra, *self.options]

    def rsh(self):
        """rsync's --rsh: the caller's ssh command through the master connection."""
        words = self._argv("-o", "ControlMaster=no")
        return " ".join(shlex.quote(word) for word in words)

    def start(self):
        with open(self.log_path, "wb") as log:
            # -f backgrounds ssh once it is authenticated; its stderr goes to a file, not a pipe that the
            # background master would hold open.
            persist = "ControlPersist=%d" % CONTROL_PERSIST_S
            self.master = subprocess.Popen(
                [*self._argv("-o", "ControlMaster=yes", "-o", persist, "-f", "-N"), self.host],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

    def wait_ready(self):
        # A blocking wait, killed by a timer: Popen.wait(timeout=...) polls with sleeps of up to 50 ms.
        killer = threading.Timer(self.timeout, self.master.kill)
        killer.start()
        try:
            rc = self.master.wait()
        finally:
            killer.cancel()
        if rc < 0:
            rc = None
        if rc != 0:
            with open(self.log_path, "rb") as log:
                said = _tail(log.read().decode("utf-8", "replace"))
            raise AnsibleActionFail(
                "sync: cannot reach %s over SSH (%s): %s"
                % (self.host, "no answer in %d s" % self.timeout if rc is None else "ssh exit %d" % rc, said or "-")
            )

    def popen(self, command, stderr):
        """``command`` on the pod through the master connection, standard input and output piped."""
        argv = [*self._argv("-o", "ControlMaster=no"), self.host, command]
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)

    def close(self):
        if self.master is not None and self.master.poll() == 0:
            subprocess.run(
                [*self._argv("-O", "exit"), self.host],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=30,
                check=False,
            )
        shutil.rmtree(self.directory, ignore_errors=True)


class _Verifier:
    """The check on the pod (plugins/module_utils/_source_verify.py), started while rsync runs: its Python
    starts, reads the manifest and its cache, then waits for ``go``."""

    def __init__(self, args, connection, recorded):
        self.args = args
        with open(recorded["source_manifest_path"], "rb") as handle:
            manifest = handle.read()
        # An interpreter may be given with arguments (/usr/bin/env python3); auto... is Ansible's discovery.
        python = shlex.split(args["python"]) if not args["python"].startswith("auto") else ["python3"]
        with open(_source_verify.__file__, encoding="utf-8") as handle:
            script = handle.read()
        words = (*python, "-c", script, args["dest"], "src", recorded["provenance"]["source"]["manifest_sha256"],
                 args["verify"])  # fmt: skip
        self.errors = tempfile.TemporaryFile()  # noqa: SIM115 (closed in finish)
        self.process = connection.popen(" ".join(shlex.quote(word) for word in words), self.errors)
        self.go = threading.Event()
        self.send_go = False
        # A thread writes: the manifest may be larger than a pipe holds before the pod reads it.
        self.writer = threading.Thread(target=self._write, args=(b"%d\n" % len(manifest) + manifest,), daemon=True)
        self.writer.start()

    def _write(self, request):
        try:
            self.process.stdin.write(request)
            self.process.stdin.flush()
            self.go.wait()
            self.process.stdin.write(b"go\n" if self.send_go else b"stop\n")
            self.process.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # the pod side ended early: its output says why

    def finish(self, go):
        """Let the check run (or stop it) and return what it found; fails naming the files that differ."""
        self.send_go = go
        self.go.set()
        timeout = self.args["verify_timeout"]
        killer = threading.Timer(timeout, self.process.kill)
        killer.start()
        try:
            out = self.process.stdout.read()
            rc = self.process.wait()
        finally:
            killer.cancel()
            self.writer.join(5)
        self.errors.seek(0)
        said = _tail(self.errors.read().decode("utf-8", "replace"))
        self.errors.close()
        if not go:
            return None
        if rc < 0:
            raise AnsibleActionFail("sync: the check of the pushed files on the pod took longer than %d s" % timeout)
        lines = out.decode("utf-8", "replace").strip().splitlines()
        try:
            checked = json.loads(lines[-1])
        except (IndexError, ValueError):
            checked = {"error": "no result (exit %d): %s" % (rc, said or "-")}
        if "error" in checked:
            raise AnsibleActionFail("sync: cannot check the pushed files on the pod: %s" % checked["error"])
        if checked["bad"]:
            raise AnsibleActionFail(
                "sync: %d pushed file(s) do not match runs/%s/source.sha256 on the pod (%s/src): %s"
                % (len(checked["bad"]), self.args["run_id"], self.args["dest"], ", ".join(checked["bad"][:50]))
            )
        return checked


class _Push:
    """rsync of the recorded paths through the master connection: ``./path`` arguments with ``--relative``
    (the same transfer as ``--files-from``, which reads its list one byte per system call: 0.07 s for 3,600
    paths here), in batches of at most ARGS_BYTES. Should a recorded file have become a directory, a device
    or a special file, or have gone, since it was recorded, it is skipped (and the check on the pod names it)."""

    def __init__(self, args, names, check_mode):
        self.args = args
        self.dest = args["dest"].rstrip("/") + "/src"
        self.target = "%s:%s/" % (args["remote"], self.dest)
        self.argv = ["rsync", "--archive", "--no-recursive", "--relative", "--no-devices", "--no-specials",
                     "--ignore-missing-args", "--itemize-changes", "--stats", "--no-human-readable",
                     "--timeout=%d" % args["rsync_timeout"]]  # fmt: skip
        if check_mode:
            self.argv.append("--dry-run")
        else:
            self.argv.append("--rsync-path=mkdir -p %s && rsync" % shlex.quote(self.dest))
        self.batches = list(_batches(["./" + name for name in names]))
        self.pushed = {"itemized": [], "files": 0, "bytes": 0}

    def _run(self, rsh, paths):
        done = subprocess.run(
            [*self.argv, "--rsh=" + rsh, *paths, self.target],
            cwd=self.args["src"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise AnsibleActionFail(
                "sync: rsync to %s failed (exit %d): %s" % (self.target, done.returncode, _tail(done.stderr))
            )
        stdout = done.stdout
        itemized = [line for line in stdout.splitlines() if CONTENT_MOVED.match(line)]
        self.pushed["itemized"] += itemized
        self.pushed["files"] += _stat_number(TRANSFERRED, stdout)
        self.pushed["bytes"] += _stat_number(TRANSFERRED_BYTES, stdout)

    def run(self, rsh):
        """Every batch through ``rsh``; what moved."""
        for paths in self.batches:
            self._run(rsh, paths)
        return self.pushed


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        result = super().run(tmp, task_vars)
        self._check_args(args)
        check_mode = bool(self._task.check_mode)
        started = time.monotonic()
        timings = {}
        connection = _Connection(args["rsh"], args["remote"], args["connect_timeout"])
        verifier = None
        try:
            connection.start()
            mark = time.monotonic()
            recorded = self._record(args)
            timings["provenance_s"] = round(time.monotonic() - mark, 3)
            mark = time.monotonic()
            connection.wait_ready()
            timings["connect_wait_s"] = round(time.monotonic() - mark, 3)
            if not check_mode:
                verifier = _Verifier(args, connection, recorded)
            push = _Push(args, [entry["path"] for entry in recorded["provenance"]["source"]["files"]], check_mode)
            mark = time.monotonic()
            pushed = push.run(connection.rsh())
            timings["rsync_s"] = round(time.monotonic() - mark, 3)
            mark = time.monotonic()
            active, verifier = verifier, None
            checked = None if active is None else active.finish(go=True)
            timings["verify_s"] = round(time.monotonic() - mark, 3)
        finally:
            if verifier is not None:
                verifier.finish(go=False)
            connection.close()
        timings["total_s"] = round(time.monotonic() - started, 3)
        source = recorded["provenance"]["source"]
        result.update(
            changed=bool(recorded["changed"] or pushed["itemized"] or (checked or {}).get("manifest_written")),
            files=recorded["files"],
            bytes=recorded["bytes"],
            files_transferred=pushed["files"],
            bytes_transferred=pushed["bytes"],
            itemized=pushed["itemized"][:100],
            files_verified=None if checked is None else checked["checked"],
            files_hashed_on_pod=None if checked is None else checked["hashed"],
            verified=checked is not None,
            manifest_sha256=source["manifest_sha256"],
            commit=source.get("commit"),
            dirty=source.get("dirty"),
            provenance_path=recorded["path"],
            provenance_changed=recorded["changed"],
            hash_stats=recorded["hash_stats"],
            dest=push.dest,
            timings=timings,
        )
        return result

    def _check_args(self, args):
        problems = []
        try:
            validate_run_id(args["run_id"])
            command_record(args["command"])
        except ProvenanceError as exc:
            problems.append(str(exc))
        if not os.path.isdir(args["src"]):
            problems.append("src %s is not a directory on the controller" % args["src"])
        run_dir = os.path.join(args["runs_dir"], args["run_id"])
        if os.path.lexists(run_dir) and not os.path.isdir(run_dir):
            problems.append("%s exists and is not a directory" % run_dir)
        if not shlex.split(args["python"] or ""):
            problems.append("python is empty")
        if not args["dest"].startswith("/"):
            problems.append("dest must be an absolute path on the pod, got %r" % args["dest"])
        for name in ("rsync_timeout", "verify_timeout", "connect_timeout"):
            if args[name] < 1:
                problems.append("%s must be >= 1, got %d" % (name, args[name]))
        if problems:
            raise AnsibleActionFail("sync_push: bad input: " + "; ".join(problems))

    def _record(self, args):
        try:
            return record(
                src=args["src"],
                run_id=args["run_id"],
                runs_dir=args["runs_dir"],
                command=args["command"],
                venv=args["venv"],
                archive=args["archive"],
                check_mode=self._task.check_mode,
                git=shutil.which("git") or "git",
                hash_cache=hash_cache_path(args["runs_dir"], args["src"]) if args["hash_cache"] else None,
            )
        except (ProvenanceError, OSError) as exc:
            raise AnsibleActionFail("sync: cannot record the source: %s" % exc) from exc
