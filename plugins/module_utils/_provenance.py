# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Runs on the controller through AnsiballZ (Python >= 3.8, standard library only): it keeps Python 3.8
# idioms (% formatting, type comments) that ruff's py311 rules would rewrite.
# ruff: noqa: UP004, UP009, UP031, RUF100
"""A run's provenance: where its source came from, what exactly ran, with which config, env and pod.

Used by the ``provenance`` module, and meant for the sync role and the resume drill too:

- ``collect(...)`` reads a source tree (a git work tree or any directory), hashes every file that would be
  synced (``git ls-files -co --exclude-standard``: tracked and untracked files, not the ignored ones) and
  builds the record (a dict, JSON-ready) with the command, config, redacted env and pod.
- ``write_archive(...)`` writes a deterministic tar of exactly those files (sorted, mtime 0, uid/gid 0, no
  user or group names, GNU format: no pax timestamps), checking every file against its manifest hash on the
  way, so the same tree gives the same archive bytes, and a dirty tree can be rebuilt bit for bit.
- ``manifest_text(...)`` is the manifest in coreutils format (``sha256sum -c source.sha256`` verifies a copy
  of the tree with no tool of ours); ``file_list_text(...)`` is the list for ``rsync --files-from``.
- ``record(...)`` (the module's whole run) writes ``<runs_dir>/<run_id>/`` atomically, or in check mode only
  computes what it would write.

Secrets: the values of environment overrides whose names look secret (``_secrets.SECRET_MARKERS``, case-insensitive
substring) are replaced by ``REDACTED`` before anything is recorded, and every occurrence of such a value
anywhere else in the record (a command line, a pod field) is replaced too. They are never written.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import re
import shlex
import socket
import stat
import subprocess
import time

from ansible_collections.trainops.gpu.plugins.module_utils._source_verify import (
    CACHE_VERSION,
    cached_sha,
    identity,
    load_cache,
    racy,
)
from ansible_collections.trainops.gpu.plugins.module_utils._files import (
    atomic_write,
    atomic_write_unless,
)
from ansible_collections.trainops.gpu.plugins.module_utils._files import validate_run_id as _validate_run_id
from ansible_collections.trainops.gpu.plugins.module_utils._secrets import MIN_SCRUB_LENGTH, is_secret_name
from ansible_collections.trainops.gpu.plugins.module_utils._version import COLLECTION_VERSION
import contextlib

FORMAT_VERSION = 1
PROVENANCE_NAME = "provenance.json"
MANIFEST_NAME = "source.sha256"
FILE_LIST_NAME = "source.files"
ARCHIVE_NAME = "source.tar"
REDACTED = "<redacted>"
ARCHIVE_CHOICES = ("auto", "always", "never")
# Keys of the record that may differ between two runs that record the same thing: the first record's are
# kept when nothing else changed. ``result`` belongs to whoever records the run's end (the train role).
TIMESTAMP_KEYS = ("recorded_at",)
CARRIED_KEYS = ("result",)
UNKNOWN_RESULT = {"exit_code": None, "status": "unknown"}
POD_KEYS = ("id", "gpu_type", "gpu_count", "data_center", "image")
CHUNK = 1024 * 1024
GIT_TIMEOUT = 120
HASH_CACHE_DIR = os.path.join(".cache", "source-hashes")


class ProvenanceError(Exception):
    """Something that stops provenance from being recorded; the message says what and where."""


# --- small pure helpers -----------------------------------------------------------------------------------


def validate_run_id(run_id):
    # type: (object) -> str
    """The run id when it follows the run-id rule (_run_layout.run_id_problem); else ProvenanceError."""
    return _validate_run_id(run_id, ProvenanceError)


def redact_env(env):
    # type: (dict) -> tuple
    """(recorded env, sorted secret names, secret values to scrub elsewhere): values as strings, secret-looking
    ones redacted."""
    recorded = {}
    secret_names = []
    secret_values = set()
    for name in sorted(env or {}):
        value = env[name]
        if isinstance(value, (dict, list, tuple, set)):
            raise ProvenanceError("env %s must be a string, number or boolean, got %s" % (name, type(value).__name__))
        value = "" if value is None else str(value)
        if is_secret_name(name):
            secret_names.append(str(name))
            if len(value) >= MIN_SCRUB_LENGTH:
                secret_values.add(value)
            recorded[str(name)] = REDACTED
        else:
            recorded[str(name)] = value
    return recorded, secret_names, secret_values


def scrub(value, secrets):
    """A copy of a JSON-like value with every occurrence of a secret string replaced by REDACTED."""
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in sorted(secrets, key=len, reverse=True):
            value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):
        return dict((scrub(k, secrets), scrub(v, secrets)) for k, v in value.items())
    if isinstance(value, list):
        return [scrub(item, secrets) for item in value]
    return value


def utc_now():
    # type: () -> str
    """RFC 3339 UTC time with microseconds and zone, e.g. 2026-12-03T00:15:02.123456+00:00."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")


def to_utc(timestamp):
    # type: (str) -> str
    """An ISO 8601 time with an offset (git's %cI) as RFC 3339 UTC."""
    parsed = datetime.datetime.fromisoformat(timestamp.strip().replace("Z", "+00:00"))
    return parsed.astimezone(datetime.timezone.utc).isoformat()


def command_record(command):
    """The exact command: argv list and one shell-quoted string (and the string as given, when it was one)."""
    if isinstance(command, str):
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise ProvenanceError("command %r cannot be split into arguments: %s" % (command, exc)) from exc
        given = command
    elif isinstance(command, (list, tuple)):
        if any(isinstance(item, (dict, list, tuple)) for item in command):
            raise ProvenanceError("command must be a list of strings or one string")
        argv = ["" if item is None else str(item) for item in command]
        given = None
    else:
        raise ProvenanceError("command must be a list of strings or one string, got %s" % type(command).__name__)
    if not argv:
        raise ProvenanceError("command must not be empty")
    record = {"argv": argv, "shell": " ".join(shlex.quote(arg) for arg in argv)}
    if given is not None:
        record["given"] = given
    return record


def pod_record(pod):
    """The pod as given (its known keys, those set), or None."""
    if not pod:
        return None
    unknown = sorted(set(pod) - set(POD_KEYS))
    if unknown:
        raise ProvenanceError("pod has unknown key(s) %s; known: %s" % (", ".join(unknown), ", ".join(POD_KEYS)))
    return dict((key, pod[key]) for key in POD_KEYS if pod.get(key) is not None)


VENV_KEYS = ("requirements", "key", "python", "venv_dir", "freeze")


def venv_record(venv):
    """The run's requirements venv (bootstrap_result.venv: the one trainops.gpu.pod_venv made or reused) as
    recorded: the requirements file's name, the venv's key, interpreter and directory, and what ``pip freeze``
    says it holds beyond the image's packages; None without one. Keys of one bootstrap call alone (built or
    reused, how long) are left out: the record says what the run ran with, not how the pod got it."""
    if not venv:
        return None
    if not isinstance(venv, dict):
        raise ProvenanceError("venv must be a mapping (bootstrap_result.venv), got %r" % (venv,))
    freeze = venv.get("freeze")
    if not isinstance(freeze, list) or not all(isinstance(line, str) for line in freeze):
        raise ProvenanceError("venv.freeze must be a list of strings (pip freeze's lines), got %r" % (freeze,))
    for name in ("key", "python", "venv_dir"):
        if not isinstance(venv.get(name), str) or not venv[name]:
            raise ProvenanceError("venv.%s must be a non-empty string, got %r" % (name, venv.get(name)))
    return dict((key, venv.get(key)) for key in VENV_KEYS)


def sha256_bytes(data):
    # type: (bytes) -> str
    return hashlib.sha256(data).hexdigest()


def sha256_file(path):
    # type: (str) -> str
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def canonical_json(value):
    # type: (object) -> str
    return json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


# --- the trainer's config hash ----------------------------------------------------------------------------
# training/trainops_train/config.py defines it: load the JSON, fill defaults, coerce and validate every value,
# drop UNHASHED_KEYS, then sha256 of the canonical JSON. When trainops_train is importable it is used; else
# this standard-library copy, which training/tests/test_provenance_config_hash.py holds equal to it (same
# fields, types and defaults; same hash for the same config; same configs refused).

TRAINER_FIELDS = (
    ("run_id", "str", "local"),
    ("seed", "int", 1234),
    ("steps", "int", 200),
    ("threads", "int", 1),
    ("device", "str", "auto"),
    ("allow_config_change", "bool", False),
    ("model", "section", None),
    ("data", "section", None),
    ("optim", "section", None),
    ("checkpoint", "section", None),
    ("telemetry_hooks", "tuple[str, ...]", ()),
)
TRAINER_SECTIONS = {
    "model": (
        ("input_dim", "int", 32),
        ("hidden_dim", "int", 64),
        ("depth", "int", 2),
        ("classes", "int", 8),
        ("dropout", "float", 0.1),
    ),
    "data": (
        ("samples", "int", 2048),
        ("batch_size", "int", 32),
        ("noise", "float", 0.05),
        ("feature_drop", "float", 0.1),
    ),
    "optim": (
        ("lr", "float", 0.01),
        ("weight_decay", "float", 0.01),
        ("warmup_steps", "int", 10),
        ("min_lr_ratio", "float", 0.1),
    ),
    "checkpoint": (
        ("mode", "str", "steps"),
        ("every_steps", "int", 50),
        ("every_seconds", "float", 600.0),
        ("mtbi_seconds", "float", 3600.0),
        ("keep_last", "int", 3),
        ("save_on_finish", "bool", True),
    ),
}
TRAINER_UNHASHED_KEYS = ("run_id", "allow_config_change", "checkpoint", "telemetry_hooks", "device")


def _coerce(where, expected, value):
    if expected == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProvenanceError("%s must be a number, got %r" % (where, value))
        return float(value)
    if expected == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProvenanceError("%s must be an integer, got %r" % (where, value))
        return value
    if expected == "bool":
        if not isinstance(value, bool):
            raise ProvenanceError("%s must be true or false, got %r" % (where, value))
        return value
    if expected == "str":
        if not isinstance(value, str):
            raise ProvenanceError("%s must be a string, got %r" % (where, value))
        return value
    if expected == "tuple[str, ...]":
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ProvenanceError("%s must be a list of strings, got %r" % (where, value))
        return list(value)
    raise ProvenanceError("%s: unsupported type %r" % (where, expected))


def _build(fields, raw, where):
    if not isinstance(raw, dict):
        raise ProvenanceError("%s must be a mapping, got %s" % (where or "config", type(raw).__name__))
    names = [name for name, _kind, _default in fields]
    unknown = sorted(set(raw) - set(names))
    if unknown:
        prefix = where + "." if where else ""
        raise ProvenanceError("unknown config key(s): %s" % ", ".join(prefix + key for key in unknown))
    built = {}
    for name, kind, default in fields:
        key = "%s.%s" % (where, name) if where else name
        if kind == "section":
            built[name] = _build(TRAINER_SECTIONS[name], raw.get(name, {}), key)
        elif name in raw:
            built[name] = _coerce(key, kind, raw[name])
        else:
            built[name] = list(default) if isinstance(default, tuple) else default
    return built


def _validate_trainer(c):
    model, data, optim, ckpt = c["model"], c["data"], c["optim"], c["checkpoint"]
    checks = [
        (c["steps"] >= 1, "steps must be >= 1"),
        (c["threads"] >= 1, "threads must be >= 1"),
        (c["device"] in ("auto", "cpu", "cuda"), "device must be auto, cpu or cuda"),
        (c["seed"] >= 0, "seed must be >= 0"),
        (bool(c["run_id"]) and "/" not in c["run_id"], "run_id must be a non-empty name without '/'"),
        (model["input_dim"] >= 1 and model["hidden_dim"] >= 1, "model dims must be >= 1"),
        (model["depth"] >= 1, "model.depth must be >= 1"),
        (model["classes"] >= 2, "model.classes must be >= 2"),
        (0.0 <= model["dropout"] < 1.0, "model.dropout must be in [0, 1)"),
        (data["batch_size"] >= 1, "data.batch_size must be >= 1"),
        (data["samples"] >= data["batch_size"], "data.samples must be >= data.batch_size"),
        (data["noise"] >= 0.0, "data.noise must be >= 0"),
        (0.0 <= data["feature_drop"] < 1.0, "data.feature_drop must be in [0, 1)"),
        (optim["lr"] > 0.0, "optim.lr must be > 0"),
        (optim["warmup_steps"] >= 0, "optim.warmup_steps must be >= 0"),
        (0.0 <= optim["min_lr_ratio"] <= 1.0, "optim.min_lr_ratio must be in [0, 1]"),
        (ckpt["mode"] in ("steps", "seconds", "auto"), "checkpoint.mode must be steps, seconds or auto"),
        (ckpt["every_steps"] >= 1, "checkpoint.every_steps must be >= 1"),
        (ckpt["every_seconds"] > 0.0, "checkpoint.every_seconds must be > 0"),
        (ckpt["mtbi_seconds"] > 0.0, "checkpoint.mtbi_seconds must be > 0"),
        (ckpt["keep_last"] >= 1, "checkpoint.keep_last must be >= 1"),
    ]
    for ok, message in checks:
        if not ok:
            raise ProvenanceError(message)
    for hook in c["telemetry_hooks"]:
        if ":" not in hook:
            raise ProvenanceError("telemetry_hooks entry %r must be 'module:callable'" % (hook,))


def builtin_trainer_config_hash(raw):
    """The reference trainer's config hash of a parsed config (a dict), standard library only."""
    config = _build(TRAINER_FIELDS, raw, "")
    _validate_trainer(config)
    for key in TRAINER_UNHASHED_KEYS:
        config.pop(key, None)
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def trainer_config_hash(path, data):
    # type: (str, bytes) -> str
    """The trainer's hash of the config file at ``path`` (its bytes ``data``): trainops_train's own function
    when that package is importable here, else the standard-library copy (JSON only)."""
    try:
        from trainops_train import config as trainer_config  # type: ignore[import-not-found]
    except ImportError:
        trainer_config = None
    if trainer_config is not None:
        try:
            return trainer_config.config_hash(trainer_config.load(path))
        except trainer_config.ConfigError as exc:
            raise ProvenanceError("config %s is not a valid trainer config: %s" % (path, exc)) from exc
    if path.endswith((".yml", ".yaml")):
        raise ProvenanceError(
            "config %s is YAML; without trainops_train importable on the controller only JSON configs are hashed" % path
        )
    try:
        raw = json.loads(data.decode("utf-8"))
    except ValueError as exc:
        raise ProvenanceError("config %s is not valid JSON: %s" % (path, exc)) from exc
    try:
        return builtin_trainer_config_hash(raw)
    except ProvenanceError as exc:
        raise ProvenanceError("config %s is not a valid trainer config: %s" % (path, exc)) from exc


def config_record(path, is_trainer):
    """Path, size and sha256 of the config file; the trainer's config hash when it is the trainer's."""
    if not path:
        return None
    path = os.path.abspath(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except (IOError, OSError) as exc:
        raise ProvenanceError("cannot read config %s: %s" % (path, exc.strerror or exc)) from exc
    record = {"path": path, "sha256": sha256_bytes(data), "bytes": len(data)}
    if is_trainer:
        record["trainer_config_hash"] = trainer_config_hash(path, data)
    return record


# --- reading the source tree ------------------------------------------------------------------------------


def _git_env():
    env = dict(os.environ)
    # No index refresh written by status (no index.lock), no pager, no prompts, stable messages.
    env.update(GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", GIT_PAGER="cat", LC_ALL="C", LANGUAGE="C")
    return env


def run_git(git, src, args, check=True):
    """(rc, stdout bytes, stderr text) of ``git -C src args``."""
    try:
        done = subprocess.run(
            [git, "-C", src, "-c", "core.quotepath=false", *list(args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_git_env(),
            timeout=GIT_TIMEOUT,
            check=False,
        )
    except OSError as exc:
        raise ProvenanceError("cannot run %s: %s" % (git, exc)) from exc
    except subprocess.TimeoutExpired:
        raise ProvenanceError("git %s in %s took over %d seconds" % (" ".join(args), src, GIT_TIMEOUT)) from None
    stderr = done.stderr.decode("utf-8", "replace").strip()
    if check and done.returncode != 0:
        raise ProvenanceError("git %s in %s failed (rc=%d): %s" % (" ".join(args), src, done.returncode, stderr))
    return done.returncode, done.stdout, stderr


def _nul_names(output):
    names = []
    for raw in output.split(b"\0"):
        if not raw:
            continue
        try:
            names.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise ProvenanceError("file name %r is not valid UTF-8; rename it to record provenance" % (raw,)) from None
    return names


def git_version(git):
    try:
        done = subprocess.run([git, "--version"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    except OSError:
        return None
    match = re.search(r"(\d+(?:\.\d+)+)", done.stdout.decode("utf-8", "replace"))
    return match.group(1) if match else None


def _strip_userinfo(url):
    # https://user:token@host/repo -> https://host/repo: a remote URL may carry a credential.
    return re.sub(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@]*@", r"\1", url)


def is_git_tree(git, src):
    """True for a directory inside a git work tree; False when git says it is not one (or git is missing and
    there is no .git); ProvenanceError when git refuses a repository (say, dubious ownership)."""
    try:
        rc, out, err = run_git(git, src, ["rev-parse", "--is-inside-work-tree"], check=False)
    except ProvenanceError:
        if os.path.exists(os.path.join(src, ".git")):
            raise
        return False
    if rc == 0:
        return out.strip() == b"true"
    if "not a git repository" in err:
        return False
    raise ProvenanceError("git cannot read %s: %s" % (src, err))


def _exclude_pathspec(excluded):
    return ["--", "."] + [":(exclude)%s" % path for path in excluded]


def git_source(git, src, excluded):
    """What git says about ``src``: commit, branch, dirty, untracked and the files to record (names)."""
    spec = _exclude_pathspec(excluded)
    rc, head, _err = run_git(git, src, ["rev-parse", "--verify", "-q", "HEAD^{commit}"], check=False)
    commit = head.decode().strip() if rc == 0 else None
    rc, branch, _err = run_git(git, src, ["symbolic-ref", "-q", "--short", "HEAD"], check=False)
    branch = branch.decode("utf-8", "replace").strip() if rc == 0 else None
    commit_time = None
    if commit:
        commit_time = to_utc(run_git(git, src, ["show", "-s", "--format=%cI", commit])[1].decode())
    toplevel = run_git(git, src, ["rev-parse", "--show-toplevel"])[1].decode("utf-8", "replace").strip()
    prefix = run_git(git, src, ["rev-parse", "--show-prefix"])[1].decode("utf-8", "replace").strip()
    rc, remote, _err = run_git(git, src, ["config", "--get", "remote.origin.url"], check=False)
    remote = _strip_userinfo(remote.decode("utf-8", "replace").strip()) if rc == 0 and remote.strip() else None
    status = run_git(git, src, ["status", "--porcelain=v1", "-z", "--untracked-files=no", *spec])[1]
    untracked = sorted(set(_nul_names(run_git(git, src, ["ls-files", "-z", "-o", "--exclude-standard", *spec])[1])))
    names = sorted(set(_nul_names(run_git(git, src, ["ls-files", "-z", "-c", "-o", "--exclude-standard", *spec])[1])))
    info = {
        "vcs": "git",
        "commit": commit,
        "branch": branch,
        "commit_time": commit_time,
        "remote": remote,
        "toplevel": toplevel,
        "subdir": prefix.rstrip("/"),
        "dirty": bool(status.strip(b"\0")) or bool(untracked) or commit is None,
        "untracked": untracked,
    }
    return info, names


def walk_source(src, excluded):
    """Every file and symbolic link under a plain directory (relative names), not descending into links."""
    excluded = set(excluded)
    names = []
    for top, dirnames, filenames in os.walk(src, followlinks=False):
        rel_top = os.path.relpath(top, src)
        rel_top = "" if rel_top == "." else rel_top
        keep = []
        for name in sorted(dirnames):
            rel = os.path.join(rel_top, name)
            if rel in excluded:
                continue
            if os.path.islink(os.path.join(top, name)):
                names.append(rel)
            else:
                keep.append(name)
        dirnames[:] = keep
        names.extend(os.path.join(rel_top, name) for name in filenames)
    return names


def _check_name(name):
    if "\n" in name or "\r" in name:
        raise ProvenanceError(
            "file name %r holds a line break: the source record (source.files, one path a line, and the sha256 "
            "manifest) cannot name it; rename the file, or keep an untracked one out with .gitignore" % name
        )


def _open_regular(path):
    # Not following a link, not blocking on a FIFO swapped in since lstat; regular files only.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ProvenanceError("%s changed into something other than a regular file while being read" % path)
    return os.fdopen(fd, "rb"), st


def _hash_regular(path, name):
    """(sha256, size, stat after the read) of a regular file, read once through a fixed buffer."""
    digest = hashlib.sha256()
    size = 0
    try:
        handle, _st = _open_regular(path)
        with handle:
            chunk = handle.read(CHUNK)
            while chunk:
                digest.update(chunk)
                size += len(chunk)
                chunk = handle.read(CHUNK)
            after = os.fstat(handle.fileno())
    except OSError as exc:
        raise ProvenanceError("cannot read %s: %s" % (name, exc.strerror or exc)) from exc
    return digest.hexdigest(), size, after


def hash_cache_path(runs_dir, src):
    # type: (str, str) -> str
    """Where the hashes of ``src``'s files are kept between records: one file per source tree, shared by its runs."""
    key = sha256_bytes(os.path.realpath(src).encode("utf-8", "surrogateescape"))[:24]
    return os.path.join(os.path.abspath(runs_dir), HASH_CACHE_DIR, key + ".json")


class HashCache(object):
    """The sha256 of files already read, keyed by (size, mtime_ns, ctime_ns, inode, device).

    A write changes a file's ctime, which no user call can set back (utime sets mtime only), so a file edited
    since, even with its size and mtime restored, misses and is read again. Entries whose mtime or ctime lie
    within a clock tick of the moment the file was read are not kept (``racy``): a second write in the same tick
    would not show (git's "racy clean" rule). A missing, damaged or foreign cache only costs a full read."""

    def __init__(self, path):
        self.path = path
        self.old = load_cache(path)  # the pod-side check's format and loader (_source_verify)
        self.new = {}
        self.hits = 0
        self.misses = 0

    def lookup(self, name, st):
        """The cached sha256 of ``name`` when ``st`` (its lstat) is the identity it was read with; else None."""
        digest = cached_sha(self.old.get(name), st)
        if digest is None:
            self.misses += 1
        else:
            self.hits += 1
            self.new[name] = self.old[name]
        return digest

    def store(self, name, st, digest):
        """Keep ``digest`` for ``st`` (the stat taken after the read) unless the file is racy."""
        ident = identity(st)
        if not racy(ident, time.time_ns()):
            self.new[name] = [*ident, digest]

    def save(self):
        """Write the entries of this record (atomically), when they differ from the file's."""
        if self.new == self.old:
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)  # two records may make it at once
        data = json.dumps({"version": CACHE_VERSION, "files": self.new}, sort_keys=True).encode("utf-8")
        atomic_write(self.path, lambda handle: handle.write(data))


def file_entries(src, names, cache=None):
    """(entries, skipped): for each regular file or symbolic link, its path, type, sha256, size and mode
    (a link's sha256 and size are its target's text); deleted tracked files, submodules and special files
    are skipped with a reason. With a HashCache, a regular file whose identity is cached is not read."""
    entries = []
    skipped = []
    for name in sorted(names, key=lambda n: n.encode("utf-8")):
        _check_name(name)
        path = os.path.join(src, name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            skipped.append({"path": name, "reason": "deleted"})
            continue
        mode = "%04o" % stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(path)
            data = target.encode("utf-8", "surrogateescape")
            entries.append(
                {"path": name, "type": "symlink", "target": target, "sha256": sha256_bytes(data), "size": len(data)}
            )
        elif stat.S_ISREG(st.st_mode):
            digest = cache.lookup(name, st) if cache is not None else None
            size = st.st_size
            if digest is None:
                digest, size, after = _hash_regular(path, name)
                if cache is not None:
                    cache.store(name, after, digest)
            entries.append({"path": name, "type": "file", "sha256": digest, "size": size, "mode": mode})
        elif stat.S_ISDIR(st.st_mode):
            skipped.append({"path": name, "reason": "directory (a git submodule or a nested repository: not recorded)"})
        else:
            skipped.append({"path": name, "reason": "not a regular file or symbolic link"})
    return entries, skipped


def _escape_manifest_name(name):
    # coreutils: a name holding a backslash is written escaped, on a line starting with a backslash.
    if "\\" in name:
        return True, name.replace("\\", "\\\\")
    return False, name


def manifest_text(entries):
    # type: (list) -> str
    """The regular files' sha256 in coreutils format (``sha256sum -c`` reads it), paths relative to the root.
    Symbolic links are not in it (sha256sum would follow them); provenance.json lists them with their target."""
    lines = []
    for entry in entries:
        if entry["type"] != "file":
            continue
        escaped, name = _escape_manifest_name(entry["path"])
        lines.append("%s%s  %s\n" % ("\\" if escaped else "", entry["sha256"], name))
    return "".join(lines)


def file_list_text(entries):
    # type: (list) -> str
    """Every recorded path (files and links), one a line: ``rsync --files-from`` reads it."""
    return "".join(entry["path"] + "\n" for entry in entries)


# --- the deterministic archive ----------------------------------------------------------------------------


class _HashingWriter(object):
    """A write-only sink: hashes what passes, and writes it on to a file when given one."""

    def __init__(self, target=None):
        self.digest = hashlib.sha256()
        self.target = target
        self.offset = 0

    def write(self, data):
        self.digest.update(data)
        self.offset += len(data)
        if self.target is not None:
            self.target.write(data)
        return len(data)

    def tell(self):
        return self.offset

    def flush(self):
        if self.target is not None:
            self.target.flush()


# The tar headers are written here rather than by tarfile, whose bytes differ between Python versions (3.8
# writes devmajor/devminor digits for regular files, 3.9+ leaves them empty): an archive must hash the same
# whichever controller Python built it. Layout: GNU tar (POSIX ustar header with the GNU magic, names or link
# targets over 100 bytes in a preceding ././@LongLink entry), exactly as Python >= 3.9's tarfile writes it.
TAR_BLOCK = 512
TAR_RECORD = 20 * TAR_BLOCK
GNU_MAGIC = b"ustar  \0"
TAR_REGULAR = b"0"
TAR_SYMLINK = b"2"
GNU_LONGNAME = b"L"
GNU_LONGLINK = b"K"


def _tar_text(value, length):
    data = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
    return data[:length] + b"\0" * (length - len(data[:length]))


def _tar_number(value, digits):
    if value < 8 ** (digits - 1):
        return ("%0*o" % (digits - 1, value)).encode("ascii") + b"\0"
    # GNU base-256 for values that do not fit in octal (files of 8 GiB and more)
    data = bytearray()
    for _i in range(digits - 1):
        data.insert(0, value & 0xFF)
        value >>= 8
    return bytes(bytearray([0o200]) + data)


def _tar_header(name, kind, size=0, mode=0, linkname=""):
    parts = [
        _tar_text(name, 100),
        _tar_number(mode & 0o7777, 8),
        _tar_number(0, 8),  # uid
        _tar_number(0, 8),  # gid
        _tar_number(size, 12),
        _tar_number(0, 12),  # mtime
        b"        ",  # checksum, counted as spaces
        kind,
        _tar_text(linkname, 100),
        GNU_MAGIC,
        _tar_text("", 32),  # uname
        _tar_text("", 32),  # gname
        _tar_text("", 8),  # devmajor
        _tar_text("", 8),  # devminor
        _tar_text("", 155),  # prefix
    ]
    block = b"".join(parts)
    block += b"\0" * (TAR_BLOCK - len(block))
    checksum = sum(bytearray(block))
    return block[:148] + ("%06o\0" % checksum).encode("ascii") + block[155:]


def _tar_padding(size):
    return b"\0" * (-size % TAR_BLOCK)


def _tar_long(value, kind):
    data = value.encode("utf-8", "surrogateescape") + b"\0"
    return _tar_header("././@LongLink", kind, size=len(data)) + data + _tar_padding(len(data))


def tar_entry_header(entry):
    """The header blocks of one entry (a GNU long-name or long-link entry first when needed)."""
    name, target = entry["path"], entry.get("target", "")
    blocks = b""
    if len(target.encode("utf-8", "surrogateescape")) > 100:
        blocks += _tar_long(target, GNU_LONGLINK)
    if len(name.encode("utf-8", "surrogateescape")) > 100:
        blocks += _tar_long(name, GNU_LONGNAME)
    if entry["type"] == "symlink":
        return blocks + _tar_header(name, TAR_SYMLINK, mode=0o777, linkname=target)
    return blocks + _tar_header(name, TAR_REGULAR, size=entry["size"], mode=int(entry["mode"], 8))


def _copy_checked(entry, path, sink):
    """Copy one file's content into the sink, checking it still has its recorded size and sha256."""
    try:
        handle, st = _open_regular(path)
    except OSError as exc:
        raise ProvenanceError("%s changed while archiving: %s" % (entry["path"], exc.strerror or exc)) from exc
    digest = hashlib.sha256()
    copied = 0
    with handle:
        if st.st_size != entry["size"]:
            raise ProvenanceError("%s changed while archiving (size)" % entry["path"])
        while copied < entry["size"]:
            chunk = handle.read(min(CHUNK, entry["size"] - copied))
            if not chunk:
                break
            digest.update(chunk)
            sink.write(chunk)
            copied += len(chunk)
        if copied != entry["size"] or handle.read(1):
            raise ProvenanceError("%s changed while archiving (size)" % entry["path"])
    if digest.hexdigest() != entry["sha256"]:
        raise ProvenanceError("%s changed while archiving (sha256)" % entry["path"])


def write_archive(src, entries, target=None):
    """Write the tar of ``entries`` (read from ``src``) to the file object ``target`` (None: only hash it).
    Returns (sha256, bytes). Sorted entries, mtime 0, uid/gid 0, empty user and group names, GNU format (long
    names without pax headers, so no timestamps): the same tree always gives the same bytes, whatever the
    Python version. Each file's content is hashed on its way in and must match its entry, else
    ProvenanceError (the tree changed)."""
    sink = _HashingWriter(target)
    for entry in sorted(entries, key=lambda e: e["path"].encode("utf-8")):
        sink.write(tar_entry_header(entry))
        if entry["type"] == "file":
            _copy_checked(entry, os.path.join(src, entry["path"]), sink)
            sink.write(_tar_padding(entry["size"]))
    sink.write(b"\0" * (2 * TAR_BLOCK))
    sink.write(b"\0" * (-sink.offset % TAR_RECORD))
    return sink.digest.hexdigest(), sink.offset


# --- the record -------------------------------------------------------------------------------------------


def _inside(path, root):
    """``path`` relative to ``root`` when it lies inside it (both resolved), else None."""
    path, root = os.path.realpath(path), os.path.realpath(root)
    if path == root:
        return "."
    if path.startswith(root.rstrip(os.sep) + os.sep):
        return os.path.relpath(path, root)
    return None


def tool_versions(git):
    return {"collection": COLLECTION_VERSION, "python": platform.python_version(), "git": git_version(git)}


def _check_archive_mode(mode):
    if mode not in ARCHIVE_CHOICES:
        raise ProvenanceError("archive must be one of %s, got %r" % (", ".join(ARCHIVE_CHOICES), mode))


def wants_archive(mode, vcs, dirty):
    # type: (str, object, bool) -> bool
    _check_archive_mode(mode)
    if mode == "always":
        return True
    if mode == "never":
        return False
    return vcs is None or dirty


class Collected(object):
    """What collect() found: the record (without the archive's hash yet), the file entries and the texts."""

    def __init__(self, record, entries, src, secrets, archive):
        self.record = record
        self.entries = entries
        self.src = src
        self.secrets = secrets
        self.archive = archive
        self.manifest = manifest_text(entries)
        self.file_list = file_list_text(entries)


def _read_inputs(command, config, config_is_trainer, env, pod, venv=None):
    """(env record, secret names, secrets, command, config, pod, venv): the run's inputs, checked and recorded."""
    env_record, secret_names, secrets = redact_env(env)
    command_rec = command_record(command)
    pod_rec = pod_record(pod)
    if config_is_trainer and not config:
        raise ProvenanceError("config_is_trainer needs config (the trainer's config file)")
    config_rec = config_record(config, config_is_trainer)
    return env_record, secret_names, secrets, command_rec, config_rec, pod_rec, venv_record(venv)


def _excluded_paths(src, runs_dir):
    """The paths below ``src`` left out of the source: the run's own outputs, even when runs_dir lies inside."""
    runs_inside = _inside(runs_dir, src)
    if runs_inside == ".":
        raise ProvenanceError(
            "runs_dir %s is the source directory itself; give a directory beside or below it" % runs_dir
        )
    return [runs_inside] if runs_inside else []


def _read_source(git, src, excluded):
    """(source info, names): what git says about ``src``, or a plain directory's files with no commit."""
    if is_git_tree(git, src):
        source, names = git_source(git, src, excluded)
        names = [n for n in names if not any(n == e or n.startswith(e + "/") for e in excluded)]
        return source, names
    source = dict((key, None) for key in ("vcs", "commit", "branch", "commit_time", "remote", "toplevel"))
    source.update({"subdir": None, "dirty": None, "untracked": []})
    return source, walk_source(src, excluded)


def _source_files(source, src, excluded, entries, skipped):
    """Add the recorded files, their totals and the manifest's hash to ``source`` (no archive yet)."""
    manifest = manifest_text(entries)
    source.update(
        {
            "path": src,
            "excluded": excluded,
            "skipped": skipped,
            "files": entries,
            "file_count": len(entries),
            "bytes": sum(entry["size"] for entry in entries if entry["type"] == "file"),
            "manifest": MANIFEST_NAME,
            "manifest_sha256": sha256_bytes(manifest.encode("utf-8")),
            "archive": None,
        }
    )


def collect(
    src,
    run_id,
    runs_dir,
    command,
    config=None,
    config_is_trainer=False,
    env=None,
    pod=None,
    archive="auto",
    git="git",
    now=None,
    hash_cache=None,
    venv=None,
):
    """Read everything a run's provenance records; writes nothing (``hash_cache``, a HashCache, is filled but
    not saved)."""
    validate_run_id(run_id)
    _check_archive_mode(archive)
    env_record, secret_names, secrets, command_rec, config_rec, pod_rec, venv_rec = _read_inputs(
        command, config, config_is_trainer, env, pod, venv
    )
    src = os.path.abspath(src)
    if not os.path.isdir(src):
        raise ProvenanceError("src %s is not a directory" % src)
    excluded = _excluded_paths(src, runs_dir)
    source, names = _read_source(git, src, excluded)
    entries, skipped = file_entries(src, names, hash_cache)
    archived = wants_archive(archive, source["vcs"], bool(source["dirty"]))
    _source_files(source, src, excluded, entries, skipped)
    record = {
        "format_version": FORMAT_VERSION,
        "run_id": run_id,
        "recorded_at": now or utc_now(),
        "controller": {"hostname": socket.gethostname()},
        "tools": tool_versions(git),
        "source": source,
        "command": command_rec,
        "config": config_rec,
        "env": env_record,
        "env_redacted": secret_names,
        "pod": pod_rec,
        "venv": venv_rec,
        "result": dict(UNKNOWN_RESULT),
    }
    # The source part is the tree as it is (paths and hashes must match the manifest and the archive): a
    # secret value inside a path there is refused, not rewritten. Everything else is scrubbed.
    _refuse_secret_paths(source, env_record, env, secrets)
    for key in ("command", "config", "pod", "venv", "controller"):
        record[key] = scrub(record[key], secrets)
    source["remote"] = scrub(source.get("remote"), secrets)
    return Collected(record, entries, src, secrets, archived)


def _refuse_secret_paths(source, env_record, env, secrets):
    if not secrets:
        return
    paths = [entry["path"] for entry in source["files"]] + [entry["path"] for entry in source["skipped"]]
    paths += [source["path"], source.get("toplevel") or ""]
    for secret in secrets:
        if any(secret in path for path in paths):
            names = sorted(name for name in env_record if env_record[name] == REDACTED and str(env[name]) == secret)
            raise ProvenanceError(
                "a path of the source holds the value of the secret env %s: it would be written in the record; "
                "rename it or leave it out of the tree" % ", ".join(names)
            )


def comparable(record):
    """The record without what may differ between two runs recording the same thing."""
    if not isinstance(record, dict):
        return record
    return dict((k, v) for k, v in record.items() if k not in TIMESTAMP_KEYS + CARRIED_KEYS)


def read_existing(path):
    try:
        with open(path, "rb") as handle:
            return json.loads(handle.read().decode("utf-8"))
    except (IOError, OSError, ValueError):
        return None


def _same_file_text(path, text):
    try:
        with open(path, "rb") as handle:
            return handle.read() == text.encode("utf-8")
    except (IOError, OSError):
        return False


def _same_archive(path, digest):
    return os.path.isfile(path) and sha256_file(path) == digest


def _write_archive_file(found, run_dir, archive_path):
    """Build the archive into a temporary file in the run directory; keep the old file when identical.
    Returns (sha256, bytes, changed)."""
    if not os.path.isdir(run_dir):
        os.makedirs(run_dir)
    (digest, size), changed = atomic_write_unless(
        archive_path,
        lambda handle: write_archive(found.src, found.entries, handle),
        lambda result: _same_archive(archive_path, result[0]),
    )
    return digest, size, changed


def _record_archive(found, run_dir, archive_path, check_mode):
    """(archive sha256 or None, changed): write (or in check mode only hash) the archive when the run has one
    and note it in the record; else remove an archive left by an earlier run."""
    if found.archive:
        if check_mode:
            archive_sha, archive_bytes = write_archive(found.src, found.entries)
            changed = not _same_archive(archive_path, archive_sha)
        else:
            archive_sha, archive_bytes, changed = _write_archive_file(found, run_dir, archive_path)
        found.record["source"]["archive"] = {
            "path": ARCHIVE_NAME,
            "sha256": archive_sha,
            "bytes": archive_bytes,
            "format": "tar (GNU, sorted, mtime 0, uid/gid 0)",
        }
        return archive_sha, changed
    if os.path.lexists(archive_path):
        # An archive of an earlier, different tree of this run would mislead whoever rebuilds from it.
        if not check_mode:
            os.unlink(archive_path)
        return None, True
    return None, False


def _keep_existing(rec, existing):
    """Carry the existing record's CARRIED_KEYS into ``rec``, and its timestamps when nothing else changed.
    True when ``rec`` is then the existing record itself (its file need not be rendered again)."""
    if not isinstance(existing, dict):
        return False
    for key in CARRIED_KEYS:
        if key in existing:
            rec[key] = existing[key]
    # json round trip: the record as it reads back (tuples as lists); the C encoder, not canonical_json's.
    plain = json.loads(json.dumps(rec))
    if comparable(existing) != comparable(plain):
        return False
    for key in TIMESTAMP_KEYS:
        if key in existing:
            rec[key] = existing[key]
            plain[key] = existing[key]
    return plain == existing


def _write_texts(run_dir, texts, check_mode):
    """Write each (path, text) whose file does not already hold that text; True when any would change."""
    changed = False
    for target, text in texts:
        if _same_file_text(target, text):
            continue
        changed = True
        if not check_mode:
            if not os.path.isdir(run_dir):
                os.makedirs(run_dir)
            data = text.encode("utf-8")
            atomic_write(target, lambda handle, data=data: handle.write(data))
    return changed


def record(
    src,
    run_id,
    runs_dir="runs",
    command=None,
    config=None,
    config_is_trainer=False,
    env=None,
    pod=None,
    archive="auto",
    check_mode=False,
    git="git",
    now=None,
    hash_cache=None,
    venv=None,
):
    """Collect the provenance and write ``<runs_dir>/<run_id>/`` (provenance.json, source.sha256, source.files,
    and source.tar when archived). Returns a dict: changed, provenance, path, source_manifest_path,
    file_list_path, archive_path, archive_sha256, files, bytes. In check mode nothing is written (the archive
    is built in memory to hash it) and ``changed`` says whether anything would be.

    ``hash_cache``: the path of a HashCache file (``hash_cache_path(runs_dir, src)``), or None to read every
    file. Files whose identity it holds are not read again; it is saved after the record (not in check mode).
    ``hash_stats`` in the result counts the files read and those taken from it."""
    validate_run_id(run_id)
    cache = HashCache(hash_cache) if hash_cache else None
    found = collect(src, run_id, runs_dir, command, config, config_is_trainer, env, pod, archive, git, now, cache, venv)
    run_dir = os.path.abspath(os.path.join(runs_dir, run_id))
    path = os.path.join(run_dir, PROVENANCE_NAME)
    manifest_path = os.path.join(run_dir, MANIFEST_NAME)
    list_path = os.path.join(run_dir, FILE_LIST_NAME)
    archive_path = os.path.join(run_dir, ARCHIVE_NAME)
    if os.path.exists(run_dir) and not os.path.isdir(run_dir):
        raise ProvenanceError("%s exists and is not a directory" % run_dir)
    existing = read_existing(path)
    archive_sha, changed = _record_archive(found, run_dir, archive_path, check_mode)
    rec = found.record
    same = _keep_existing(rec, existing)
    # provenance.json last: it names the files written before it. An unchanged record is not rendered again
    # (canonical_json's indented form is the slow part of an unchanged record of a large tree).
    texts = [(manifest_path, found.manifest), (list_path, found.file_list)]
    if not same:
        texts.append((path, canonical_json(rec)))
    changed = _write_texts(run_dir, texts, check_mode) or changed
    if cache is not None and not check_mode:
        # A cache that cannot be written only costs a full read next time.
        with contextlib.suppress(IOError, OSError):
            cache.save()
    return {
        "changed": changed,
        "provenance": rec,
        "path": path,
        "run_dir": run_dir,
        "source_manifest_path": manifest_path,
        "file_list_path": list_path,
        "archive_path": archive_path if found.archive else None,
        "archive_sha256": archive_sha,
        "files": rec["source"]["file_count"],
        "bytes": rec["source"]["bytes"],
        "hash_stats": {"cached": cache.hits, "read": cache.misses} if cache is not None else None,
    }
