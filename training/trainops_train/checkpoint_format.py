# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This file runs on target hosts through AnsiballZ (Python >= 3.8, standard library only): it keeps
# Python 3.8 idioms (datetime.timezone.utc, % formatting, type comments) that ruff's py311 rules would
# rewrite; the collection's lint leaves those rules off, hence RUF100.
# ruff: noqa: UP004, UP009, UP017, UP031, RUF100
"""The one definition of the trainops checkpoint format: names, layout, parsing and verification.

Both sides import this file. It lives in the trainer's package (`from trainops_train import
checkpoint_format`), so a wheel, an sdist and a copied training/ all carry it; the collection's
plugins/module_utils/_checkpoint_format.py is a symlink to it, read by the `checkpoint_verify` module
(through AnsiballZ on a target host, where only the standard library can be assumed, Python >= 3.8).
Writing (hash-while-write, atomic commit, pruning) lives in the trainer; everything a reader must agree
on lives here. Where a run keeps its checkpoint root is the run layout's business (run_layout.py).

Layout of a checkpoint root (normally <durable>/trainops/<run_id>/ckpt):

    step-00000120/                 a committed checkpoint (8+ digit step number)
        model.pt, optim.pt, ...    payload files
        manifest.json              step, run id, config hash, files with sizes and sha256, chain link
        SHA256SUMS                 coreutils format over the payload files and manifest.json
    .tmp-step-00000140-<pid>-<hex> a save in progress, or the remains of one that died (never valid)
    .deleting-step-00000080-<hex>  a checkpoint being pruned (renamed before removal)
    step-00000100.corrupt-<UTC>    a checkpoint that failed verification, moved aside (never deleted)
    tmp-step-00000140-....partial-<UTC>   the remains of an interrupted save, moved aside
    latest                         a hint naming the newest committed checkpoint; readers never trust it
    .writer.lock                   flock held by the trainer writing under this root, for its whole life
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import hashlib
import json
import os
import re
import stat
import time

FORMAT_NAME = "trainops-checkpoint"
FORMAT_VERSION = 1

STEP_PREFIX = "step-"
STEP_DIGITS = 8
SUMS_NAME = "SHA256SUMS"
MANIFEST_NAME = "manifest.json"
LATEST_NAME = "latest"
WRITER_LOCK_NAME = ".writer.lock"
TEMP_PREFIX = ".tmp-"
DELETING_PREFIX = ".deleting-"
ASIDE_CORRUPT = "corrupt"
ASIDE_PARTIAL = "partial"

# Reads stream through one buffer of this size: verification never holds a file in memory.
READ_BUFFER_BYTES = 4 << 20
# What a reader reads whole is capped: a manifest.json or SHA256SUMS larger than this, or a manifest
# that nests deeper than MANIFEST_MAX_DEPTH, is malformed (the writer's are a few kB, 3 levels deep).
MANIFEST_MAX_BYTES = 1 << 20
MANIFEST_MAX_DEPTH = 32
SUMS_MAX_BYTES = 1 << 20
LATEST_MAX_BYTES = 256
# Files are opened without following a symbolic link and without blocking (a FIFO is refused, not waited on).
_OPEN_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_OPEN_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)

_STEP_RE = re.compile(r"^step-([0-9]{%d,})\Z" % STEP_DIGITS)
# Any spelling of a step directory; only step_dirname(step)'s is canonical, the others are reported invalid.
_STEP_LIKE_RE = re.compile(r"^step-([0-9]+)\Z")
_TEMP_RE = re.compile(r"^\.tmp-step-([0-9]{%d,})-[0-9]+-[0-9a-f]+$" % STEP_DIGITS)
_DELETING_RE = re.compile(r"^\.deleting-step-([0-9]{%d,})-[0-9a-f]+$" % STEP_DIGITS)
_ASIDE_RE = re.compile(r"^(.+)\.(corrupt|partial)-([0-9]{8}T[0-9]{6}Z)(-[0-9]+)?$")
_SUMS_LINE_RE = re.compile(r"^([0-9a-f]{64}) ([ *])(.+)$")
# Payload names stay within what coreutils writes without escaping, and never hide or nest.
_PAYLOAD_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}\Z")
# RFC 3339 date-time (section 5.6): full-date "T" full-time with a Z or +hh:mm offset
_RFC3339_RE = re.compile(
    r"^([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?"
    r"([Zz]|[+-]([0-9]{2}):([0-9]{2}))\Z"
)
# check_json_depth: the characters that open or close a level or a string, and the rest of a string
_JSON_SPECIAL_RE = re.compile(r'["\[\]{}]')
_JSON_STRING_TAIL_RE = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)

MANIFEST_REQUIRED = {
    "format": str,
    "format_version": int,
    "step": int,
    "run_id": str,
    "config_hash": str,
    "source": dict,
    "world_size": int,
    "captured": dict,
    "files": dict,
    "previous_step": (int, type(None)),
    "previous_manifest_sha256": (str, type(None)),
    "created_at": str,
}


class CheckpointFormatError(ValueError):
    """A name, a SHA256SUMS text or a manifest that does not follow the format."""


# ---------------------------------------------------------------------------------------------- names


def step_dirname(step):
    # type: (int) -> str
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise CheckpointFormatError("step must be a non-negative integer, got %r" % (step,))
    return "%s%0*d" % (STEP_PREFIX, STEP_DIGITS, step)


def parse_step_dirname(name):
    # type: (str) -> int | None
    """The step of a committed checkpoint directory name, or None when the name is not one. Only the
    canonical spelling counts (step_dirname(step): 8 digits, more only when the step needs them), so
    step-000000200 is not a second name of step-00000200."""
    match = _STEP_RE.match(name)
    if not match:
        return None
    step = int(match.group(1))
    return step if name == step_dirname(step) else None


def is_rfc3339(text):
    # type: (object) -> bool
    """True for an RFC 3339 date-time with its offset (what datetime.isoformat() of an aware time gives)."""
    match = _RFC3339_RE.match(text) if isinstance(text, str) else None
    if not match:
        return False
    year, month, day, hour, minute, second = (int(group) for group in match.groups()[:6])
    offset_hours, offset_minutes = int(match.group(9) or 0), int(match.group(10) or 0)
    if hour > 23 or minute > 59 or second > 60 or offset_hours > 23 or offset_minutes > 59:
        return False
    try:
        datetime.date(year, month, day)
    except ValueError:
        return False
    return True


def temp_dirname(step, pid, nonce):
    # type: (int, int, str) -> str
    """The name a save writes under; pid and nonce keep concurrent or repeated attempts apart."""
    if not re.match(r"^[0-9a-f]+$", nonce):
        raise CheckpointFormatError("nonce must be lowercase hex, got %r" % (nonce,))
    return "%s%s-%d-%s" % (TEMP_PREFIX, step_dirname(step), pid, nonce)


def parse_temp_dirname(name):
    # type: (str) -> int | None
    match = _TEMP_RE.match(name)
    return int(match.group(1)) if match else None


def deleting_dirname(step, nonce):
    # type: (int, str) -> str
    return "%s%s-%s" % (DELETING_PREFIX, step_dirname(step), nonce)


def parse_deleting_dirname(name):
    # type: (str) -> int | None
    match = _DELETING_RE.match(name)
    return int(match.group(1)) if match else None


def aside_dirname(name, kind, now=None):
    # type: (str, str, datetime.datetime | None) -> str
    """The name a corrupt checkpoint or a partial save gets when moved aside (leading dot dropped)."""
    if kind not in (ASIDE_CORRUPT, ASIDE_PARTIAL):
        raise CheckpointFormatError("aside kind must be %r or %r, got %r" % (ASIDE_CORRUPT, ASIDE_PARTIAL, kind))
    when = now or datetime.datetime.now(datetime.timezone.utc)
    return "%s.%s-%s" % (name.lstrip("."), kind, when.astimezone(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ"))


def parse_aside_dirname(name):
    # type: (str) -> tuple[str, str] | None
    """(original name without its leading dot, kind) for a moved-aside directory, else None."""
    match = _ASIDE_RE.match(name)
    return (match.group(1), match.group(2)) if match else None


def is_payload_name(name):
    # type: (str) -> bool
    return bool(_PAYLOAD_NAME_RE.match(name)) and name not in (SUMS_NAME, MANIFEST_NAME)


# ------------------------------------------------------------------------------------- SHA256SUMS


def format_sums(hashes):
    # type: (dict[str, str]) -> str
    """SHA256SUMS text in coreutils text mode ("<hex>  <name>"), sorted by name."""
    lines = []
    for name in sorted(hashes):
        if name != MANIFEST_NAME and not is_payload_name(name):
            raise CheckpointFormatError("file name %r is not allowed in a checkpoint" % (name,))
        digest = hashes[name]
        if not re.match(r"^[0-9a-f]{64}$", digest):
            raise CheckpointFormatError("sha256 of %r is not 64 lowercase hex digits" % (name,))
        lines.append("%s  %s\n" % (digest, name))
    return "".join(lines)


def parse_sums(text):
    # type: (str) -> dict[str, str]
    """Name -> sha256 from SHA256SUMS text; raises CheckpointFormatError on any malformed line."""
    hashes = {}  # type: dict[str, str]
    for number, line in enumerate(text.splitlines(), 1):
        match = _SUMS_LINE_RE.match(line)
        if not match:
            raise CheckpointFormatError("%s line %d is malformed" % (SUMS_NAME, number))
        name = match.group(3)
        if name != MANIFEST_NAME and not is_payload_name(name):
            raise CheckpointFormatError("%s line %d names a disallowed file %r" % (SUMS_NAME, number, name))
        if name in hashes:
            raise CheckpointFormatError("%s lists %r twice" % (SUMS_NAME, name))
        hashes[name] = match.group(1)
    if not hashes:
        raise CheckpointFormatError("%s is empty" % SUMS_NAME)
    return hashes


# --------------------------------------------------------------------------------------- manifest


def manifest_bytes(manifest):
    # type: (dict) -> bytes
    """The exact bytes written as manifest.json; its sha256 is what the next manifest chains to."""
    return (json.dumps(manifest, sort_keys=True, indent=2, allow_nan=False) + "\n").encode("utf-8")


def build_manifest(
    step,  # type: int
    run_id,  # type: str
    config_hash,  # type: str
    source,  # type: dict
    world_size,  # type: int
    captured,  # type: dict
    files,  # type: dict[str, dict]
    previous_step,  # type: int | None
    previous_manifest_sha256,  # type: str | None
    created_at=None,  # type: str | None
):
    # type: (...) -> dict
    manifest = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "step": step,
        "run_id": run_id,
        "config_hash": config_hash,
        "source": source,
        "world_size": world_size,
        "captured": captured,
        "files": files,
        "previous_step": previous_step,
        "previous_manifest_sha256": previous_manifest_sha256,
        "created_at": created_at or datetime.datetime.now(datetime.timezone.utc).isoformat(),
    }
    errors = manifest_errors(manifest)
    if errors:
        raise CheckpointFormatError("; ".join(errors))
    return manifest


def _manifest_type_errors(manifest):
    # type: (dict) -> list[str]
    """Missing keys and values of the wrong JSON type (a bool is never an int)."""
    errors = []
    for key, kind in MANIFEST_REQUIRED.items():
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if key not in manifest:
            errors.append("manifest lacks %r" % key)
        elif not isinstance(manifest[key], kinds) or (isinstance(manifest[key], bool) and bool not in kinds):
            errors.append("manifest %r has the wrong type" % key)
    return errors


def _manifest_value_errors(manifest):
    # type: (dict) -> list[str]
    errors = []
    if manifest["format"] != FORMAT_NAME:
        errors.append("manifest format is %r, expected %r" % (manifest["format"], FORMAT_NAME))
    version = manifest["format_version"]
    if version > FORMAT_VERSION:
        errors.append("manifest format_version %d is newer than this reader (%d)" % (version, FORMAT_VERSION))
    elif version != FORMAT_VERSION:
        errors.append("manifest format_version %d is not a version of the format (%d)" % (version, FORMAT_VERSION))
    if manifest["step"] < 0:
        errors.append("manifest step is negative")
    if manifest["world_size"] < 1:
        errors.append("manifest world_size %d is not at least 1" % manifest["world_size"])
    if not is_rfc3339(manifest["created_at"]):
        errors.append("manifest created_at %r is not an RFC 3339 timestamp" % (manifest["created_at"][:64],))
    previous, previous_sha = manifest["previous_step"], manifest["previous_manifest_sha256"]
    if (previous is None) != (previous_sha is None):
        errors.append("manifest previous_step and previous_manifest_sha256 must both be set or both be null")
    elif previous is not None and not 0 <= previous < manifest["step"]:
        errors.append("manifest previous_step %d is not before step %d" % (previous, manifest["step"]))
    elif previous_sha is not None and not _SHA256_RE.match(previous_sha):
        errors.append("manifest previous_manifest_sha256 is not 64 lowercase hex digits")
    return errors


def _manifest_file_errors(files):
    # type: (dict) -> list[str]
    if not files:
        return ["manifest lists no payload files"]
    errors = []
    for name, entry in files.items():
        if not is_payload_name(name):
            errors.append("manifest lists a disallowed file name %r" % (name,))
        elif (
            not isinstance(entry, dict)
            or not isinstance(entry.get("size"), int)
            or isinstance(entry.get("size"), bool)
            or entry["size"] < 0
            or not isinstance(entry.get("sha256"), str)
            or not _SHA256_RE.match(entry["sha256"])
        ):
            errors.append("manifest entry for %r needs an integer size and a sha256" % (name,))
    return errors


def manifest_errors(manifest):
    # type: (object) -> list[str]
    """Everything wrong with a parsed manifest; empty when it follows the schema."""
    if not isinstance(manifest, dict):
        return ["manifest is not a JSON object"]
    errors = _manifest_type_errors(manifest)
    if errors:
        return errors
    return _manifest_value_errors(manifest) + _manifest_file_errors(manifest["files"])


# ------------------------------------------------------------------------------------- verification


class VerifyTimeout(Exception):
    """The verification deadline passed (raised inside one checkpoint's verification, reported by it)."""


def _check_deadline(deadline, what):
    # type: (float | None, str) -> None
    if deadline is not None and time.monotonic() >= deadline:
        raise VerifyTimeout(what)


def open_regular(name, dir_fd=None):
    # type: (str, int | None) -> tuple[int, os.stat_result]
    """(fd, fstat) of a regular file opened for reading, never following a symbolic link (the last path
    component) and never blocking: a FIFO, a device or a socket is refused, not waited on."""
    label = os.path.basename(name)
    try:
        fd = os.open(name, _OPEN_FILE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CheckpointFormatError("%s: is a symbolic link" % label) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CheckpointFormatError("%s: not a regular file" % label)
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def _read_small(name, limit, dir_fd=None):
    # type: (str, int, int | None) -> bytes
    """A whole small regular file (see open_regular); larger than limit bytes is an error."""
    fd, info = open_regular(name, dir_fd)
    chunks = []  # type: list[bytes]
    total = 0
    try:
        if info.st_size > limit:
            raise CheckpointFormatError("%s is larger than %d bytes" % (os.path.basename(name), limit))
        while total <= limit:
            chunk = os.read(fd, limit + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    if total > limit:
        raise CheckpointFormatError("%s is larger than %d bytes" % (os.path.basename(name), limit))
    return b"".join(chunks)


def _sha256_fd(fd, label, buffer_bytes=READ_BUFFER_BYTES, deadline=None):
    # type: (int, str, int, float | None) -> tuple[str, int]
    """(sha256 hex, size) of an open file, streamed through one reusable buffer; checks the deadline
    before every buffer. Does not close fd."""
    digest = hashlib.sha256()
    buffer = bytearray(buffer_bytes)
    view = memoryview(buffer)
    size = 0
    while True:
        _check_deadline(deadline, "hashing %s (%d bytes read)" % (label, size))
        count = os.readv(fd, [buffer])
        if not count:
            break
        digest.update(view[:count])
        size += count
    return digest.hexdigest(), size


def sha256_file(path, buffer_bytes=READ_BUFFER_BYTES, deadline=None):
    # type: (str, int, float | None) -> tuple[str, int]
    """(sha256 hex, size) of a regular file (not through a symbolic link), streamed through one reusable
    buffer; raises VerifyTimeout once time.monotonic() passes deadline."""
    fd, _info = open_regular(path)
    try:
        return _sha256_fd(fd, os.path.basename(path), buffer_bytes, deadline)
    finally:
        os.close(fd)


def check_json_depth(text, limit):
    # type: (str, int) -> None
    """Raise CheckpointFormatError when JSON text nests arrays and objects deeper than limit. Counted in
    one loop, without recursion (json.loads recurses, and a deep enough document makes it raise
    RecursionError); strings are skipped, so brackets inside them do not count."""
    depth = 0
    match = _JSON_SPECIAL_RE.search(text)
    while match:
        char = match.group()
        position = match.end()
        if char == '"':
            tail = _JSON_STRING_TAIL_RE.match(text, position)
            if tail is None:
                raise CheckpointFormatError("unterminated JSON string")
            position = tail.end()
        elif char in "[{":
            depth += 1
            if depth > limit:
                raise CheckpointFormatError("JSON nests deeper than %d levels" % limit)
        else:
            depth -= 1
        match = _JSON_SPECIAL_RE.search(text, position)


def parse_manifest(raw):
    # type: (bytes) -> object
    """The parsed manifest.json bytes, within the size and nesting caps (not yet schema-checked)."""
    if len(raw) > MANIFEST_MAX_BYTES:
        raise CheckpointFormatError("%s is larger than %d bytes" % (MANIFEST_NAME, MANIFEST_MAX_BYTES))
    text = raw.decode("utf-8")
    check_json_depth(text, MANIFEST_MAX_DEPTH)
    return json.loads(text)


class CheckpointReport(object):
    """What verifying one checkpoint directory found."""

    def __init__(self, path):
        # type: (str) -> None
        self.path = path
        self.name = os.path.basename(os.path.normpath(path))
        self.step = parse_step_dirname(self.name)  # type: int | None
        self.errors = []  # type: list[str]
        self.timed_out = False
        self.manifest = None  # type: dict | None
        self.manifest_sha256 = None  # type: str | None
        self.files = {}  # type: dict[str, dict]
        self.bytes_total = 0

    @property
    def valid(self):
        # type: () -> bool
        return not self.errors and not self.timed_out

    def to_dict(self):
        # type: () -> dict
        manifest = self.manifest or {}
        return {
            "path": self.path,
            "step": self.step,
            "valid": self.valid,
            "errors": list(self.errors),
            "timed_out": self.timed_out,
            "manifest_sha256": self.manifest_sha256,
            "previous_step": manifest.get("previous_step"),
            "previous_manifest_sha256": manifest.get("previous_manifest_sha256"),
            "run_id": manifest.get("run_id"),
            "config_hash": manifest.get("config_hash"),
            "world_size": manifest.get("world_size"),
            "created_at": manifest.get("created_at"),
            "files": dict((name, dict(entry)) for name, entry in self.files.items()),
            "bytes_total": self.bytes_total,
        }


def _open_checkpoint_dir(path, report):
    # type: (str, CheckpointReport) -> int | None
    """An fd of the checkpoint directory itself, never through a symbolic link; None with the error recorded."""
    try:
        info = os.lstat(path.rstrip("/") or "/")
    except OSError:
        report.errors.append("not a directory")
        return None
    if stat.S_ISLNK(info.st_mode):
        report.errors.append("is a symbolic link")
        return None
    if not stat.S_ISDIR(info.st_mode):
        report.errors.append("not a directory")
        return None
    try:
        return os.open(path, _OPEN_DIR_FLAGS)
    except OSError as exc:
        report.errors.append("cannot open directory: %s" % exc.strerror)
        return None


def _list_checkpoint(dir_fd, report):
    # type: (int, CheckpointReport) -> list[str] | None
    """The sorted entries of a checkpoint directory, or None (with the error recorded) when there are none."""
    try:
        entries = sorted(os.listdir(dir_fd))
    except OSError as exc:
        report.errors.append("cannot list directory: %s" % exc.strerror)
        return None
    if not entries:
        report.errors.append("empty directory")
        return None
    return entries


def _read_checkpoint_sums(dir_fd, entries, report):
    # type: (int, list[str], CheckpointReport) -> dict[str, str] | None
    if SUMS_NAME not in entries:
        report.errors.append("%s missing" % SUMS_NAME)
        return None
    try:
        return parse_sums(_read_small(SUMS_NAME, SUMS_MAX_BYTES, dir_fd).decode("utf-8"))
    except (CheckpointFormatError, UnicodeDecodeError, OSError) as exc:
        report.errors.append("%s unreadable: %s" % (SUMS_NAME, exc))
        return None


def _read_checkpoint_manifest(dir_fd, entries, sums, report):
    # type: (int, list[str], dict[str, str] | None, CheckpointReport) -> dict | None
    """The manifest when it parses and follows the schema; also checks its hash against SHA256SUMS and
    its step against the directory name."""
    if MANIFEST_NAME not in entries:
        report.errors.append("%s missing" % MANIFEST_NAME)
        return None
    try:
        raw = _read_small(MANIFEST_NAME, MANIFEST_MAX_BYTES, dir_fd)
        report.manifest_sha256 = hashlib.sha256(raw).hexdigest()
        parsed = parse_manifest(raw)
        schema_errors = manifest_errors(parsed)
        report.errors.extend(schema_errors)
        report.manifest = None if schema_errors else parsed
    except (CheckpointFormatError, UnicodeDecodeError, OSError, ValueError) as exc:
        report.errors.append("%s unreadable: %s" % (MANIFEST_NAME, exc))
    if sums is not None and report.manifest_sha256 is not None:
        if sums.get(MANIFEST_NAME) is None:
            report.errors.append("%s does not list %s" % (SUMS_NAME, MANIFEST_NAME))
        elif sums[MANIFEST_NAME] != report.manifest_sha256:
            report.errors.append("%s: sha256 mismatch" % MANIFEST_NAME)
    manifest = report.manifest
    if manifest is not None:
        if report.step is not None and manifest["step"] != report.step:
            report.errors.append("manifest step %d does not match directory name" % manifest["step"])
        if report.step is None:
            report.step = manifest["step"]
    return manifest


def _expected_files(entries, sums, manifest, report):
    # type: (list[str], dict[str, str] | None, dict | None, CheckpointReport) -> set[str]
    """The payload files either list names; records disagreement between the lists and unlisted entries."""
    expected = set()  # type: set[str]
    if manifest is not None:
        expected.update(manifest["files"])
    if sums is not None:
        expected.update(name for name in sums if name != MANIFEST_NAME)
        if manifest is not None and set(manifest["files"]) != set(sums) - {MANIFEST_NAME}:
            report.errors.append("%s and %s list different files" % (SUMS_NAME, MANIFEST_NAME))
    for name in entries:
        if name not in expected and name not in (SUMS_NAME, MANIFEST_NAME):
            report.errors.append("unlisted entry %r" % name)
    return expected


def _verify_payload(dir_fd, name, sums, manifest, hash_files, deadline, report):
    # type: (int, str, dict[str, str] | None, dict | None, bool, float | None, CheckpointReport) -> None
    """One payload file: a regular file (no link), the listed size, and (with hash_files) the listed sha256."""
    entry = {"size": None, "sha256": None, "ok": False}  # type: dict
    report.files[name] = entry
    listed = manifest["files"].get(name) if manifest is not None else None
    listed_sha = (sums or {}).get(name) or (listed or {}).get("sha256")
    if listed is not None and sums is not None and name in sums and sums[name] != listed["sha256"]:
        report.errors.append("%s: sha256 differs between %s and %s" % (name, SUMS_NAME, MANIFEST_NAME))
    try:
        fd, info = open_regular(name, dir_fd)
    except CheckpointFormatError as exc:
        report.errors.append(str(exc))
        return
    except OSError:
        report.errors.append("%s: missing or not a regular file" % name)
        return
    try:
        entry["size"] = info.st_size
        report.bytes_total += info.st_size
        if listed is not None and info.st_size != listed["size"]:
            report.errors.append("%s: size %d, manifest says %d" % (name, info.st_size, listed["size"]))
            return
        if hash_files:
            try:
                entry["sha256"], _size = _sha256_fd(fd, name, deadline=deadline)
            except OSError as exc:
                report.errors.append("%s: unreadable: %s" % (name, exc.strerror))
                return
            if listed_sha is not None and entry["sha256"] != listed_sha:
                report.errors.append("%s: sha256 mismatch" % name)
                return
        entry["ok"] = listed is not None or listed_sha is not None
    finally:
        os.close(fd)


def _verify_into(report, hash_files, deadline):
    # type: (CheckpointReport, bool, float | None) -> None
    dir_fd = _open_checkpoint_dir(report.path, report)
    if dir_fd is None:
        return
    try:
        entries = _list_checkpoint(dir_fd, report)
        if entries is None:
            return
        sums = _read_checkpoint_sums(dir_fd, entries, report)
        manifest = _read_checkpoint_manifest(dir_fd, entries, sums, report)
        for name in sorted(_expected_files(entries, sums, manifest, report)):
            _verify_payload(dir_fd, name, sums, manifest, hash_files, deadline, report)
    finally:
        os.close(dir_fd)


def verify_checkpoint(path, hash_files=True, deadline=None):
    # type: (str, bool, float | None) -> CheckpointReport
    """Verify one checkpoint directory: SHA256SUMS, manifest schema, file set, sizes and hashes.

    With hash_files=False only the structure, the sizes and the manifest's own hash are checked (cheap).
    Nothing is read through a symbolic link or from anything but a regular file. Once time.monotonic()
    passes deadline the verification stops: the report is then `timed_out` (neither valid nor corrupt).
    Any other failure while verifying becomes one of the report's errors, never an exception.
    """
    report = CheckpointReport(path)
    try:
        _check_deadline(deadline, "before it started")
        _verify_into(report, hash_files, deadline)
    except VerifyTimeout as exc:
        report.timed_out = True
        report.errors.append("verification timed out: %s" % exc)
    except Exception as exc:  # one checkpoint's failure, whatever it is, is that checkpoint's error
        report.errors.append("verification failed: %s: %s" % (type(exc).__name__, exc))
    return report


class RootReport(object):
    """What verifying a checkpoint root found, newest checkpoint first."""

    def __init__(self, root):
        # type: (str) -> None
        self.root = root
        self.checkpoints = []  # type: list[CheckpointReport]
        self.unverified = []  # type: list[str]
        self.stray_temp = []  # type: list[str]
        self.deleting = []  # type: list[str]
        self.aside = []  # type: list[str]
        self.latest_hint = None  # type: str | None
        self.timed_out = None  # type: str | None

    @property
    def newest_valid(self):
        # type: () -> CheckpointReport | None
        for report in self.checkpoints:
            if report.valid:
                return report
        return None

    @property
    def corrupt(self):
        # type: () -> list[CheckpointReport]
        """Checkpoints found invalid; one whose verification timed out is not known to be either."""
        return [report for report in self.checkpoints if not report.valid and not report.timed_out]

    def to_dict(self):
        # type: () -> dict
        newest = self.newest_valid
        return {
            "root": self.root,
            "newest_valid_step": newest.step if newest else None,
            "newest_valid_path": newest.path if newest else None,
            "corrupt": [{"path": r.path, "step": r.step, "errors": list(r.errors)} for r in self.corrupt],
            "checkpoints": [r.to_dict() for r in self.checkpoints],
            "unverified": list(self.unverified),
            "stray_temp": list(self.stray_temp),
            "deleting": list(self.deleting),
            "aside": list(self.aside),
            "latest_hint": self.latest_hint,
            "timed_out": self.timed_out,
        }


def read_latest_hint(root):
    # type: (str) -> str | None
    """The checkpoint name the root's `latest` holds, or None: also when `latest` is a symbolic link, not a
    small regular file, or holds anything but a canonical step-N name. Never any other content."""
    try:
        text = _read_small(os.path.join(root, LATEST_NAME), LATEST_MAX_BYTES).decode("ascii").strip()
    except (OSError, CheckpointFormatError, UnicodeDecodeError):
        return None
    return text if parse_step_dirname(text) is not None else None


def _manifest_matches_sums(path):
    # type: (str) -> str | None
    """sha256 of a checkpoint's manifest.json when SHA256SUMS vouches for it, else None."""
    try:
        dir_fd = os.open(path, _OPEN_DIR_FLAGS)
    except OSError:
        return None
    try:
        raw = _read_small(MANIFEST_NAME, MANIFEST_MAX_BYTES, dir_fd)
        sums = parse_sums(_read_small(SUMS_NAME, SUMS_MAX_BYTES, dir_fd).decode("utf-8"))
    except (OSError, CheckpointFormatError, UnicodeDecodeError):
        return None
    finally:
        os.close(dir_fd)
    digest = hashlib.sha256(raw).hexdigest()
    return digest if sums.get(MANIFEST_NAME) == digest else None


def _check_chain(checkpoint, steps):
    # type: (CheckpointReport, dict[int, str]) -> None
    """A valid checkpoint's link to a present predecessor that its own SHA256SUMS vouches for."""
    assert checkpoint.manifest is not None
    previous = checkpoint.manifest["previous_step"]
    if previous is None or previous not in steps:
        return
    vouched = _manifest_matches_sums(steps[previous])
    if vouched is not None and vouched != checkpoint.manifest["previous_manifest_sha256"]:
        checkpoint.errors.append(
            "manifest chain broken: previous_manifest_sha256 does not match %s/%s"
            % (step_dirname(previous), MANIFEST_NAME)
        )


def noncanonical_report(path):
    # type: (str) -> CheckpointReport
    """The report of a step-<digits> directory whose name is not its step's canonical spelling."""
    report = CheckpointReport(path)
    step = int(_STEP_LIKE_RE.match(report.name).group(1))
    report.errors.append("non-canonical name: step %d is spelled %s" % (step, step_dirname(step)))
    return report


def _scan_root(root, report):
    # type: (str, RootReport) -> tuple[dict[int, str], list[str]]
    """(canonical step -> path, paths of step-<digits> entries spelled otherwise); files the rest in report."""
    steps = {}  # type: dict[int, str]
    odd = []  # type: list[str]
    for name in sorted(os.listdir(root)):
        full = os.path.join(root, name)
        step = parse_step_dirname(name)
        if step is not None:
            steps[step] = full
        elif _STEP_LIKE_RE.match(name):
            odd.append(full)
        elif parse_temp_dirname(name) is not None:
            report.stray_temp.append(full)
        elif parse_deleting_dirname(name) is not None:
            report.deleting.append(full)
        elif parse_aside_dirname(name) is not None:
            report.aside.append(full)
        elif name == LATEST_NAME:
            report.latest_hint = read_latest_hint(root)
    return steps, odd


def verify_root(root, stop_at_first_valid=False, hash_files=True, deadline=None):
    # type: (str, bool, bool, float | None) -> RootReport
    """Verify every committed checkpoint under root, newest first, and check the manifest chain.

    A checkpoint whose predecessor is present, and vouched for by the predecessor's own SHA256SUMS, must
    name that predecessor's manifest hash; a pruned predecessor leaves the link unchecked. With
    stop_at_first_valid, older checkpoints than the newest valid one are listed in `unverified`. When
    time.monotonic() passes deadline, the checkpoint being verified is named in `timed_out` and the older
    ones are listed in `unverified`. A step-<digits> directory spelled other than its step's canonical
    name is reported last, invalid ("non-canonical name"), never ignored.
    """
    report = RootReport(root)
    if not os.path.isdir(root):
        raise CheckpointFormatError("checkpoint root %s is not a directory" % root)
    steps, odd = _scan_root(root, report)
    found_valid = False
    for step in sorted(steps, reverse=True):
        if report.timed_out is not None or (found_valid and stop_at_first_valid):
            report.unverified.append(steps[step])
            continue
        checkpoint = verify_checkpoint(steps[step], hash_files=hash_files, deadline=deadline)
        if checkpoint.timed_out:
            report.timed_out = checkpoint.path
        elif checkpoint.valid:
            try:
                _check_chain(checkpoint, steps)
            except Exception as exc:  # like any failure inside one checkpoint: its error, not the root's
                checkpoint.errors.append("chain check failed: %s: %s" % (type(exc).__name__, exc))
        report.checkpoints.append(checkpoint)
        found_valid = found_valid or checkpoint.valid
    report.checkpoints.extend(noncanonical_report(path) for path in odd)
    return report


def is_checkpoint_dir(path):
    # type: (str) -> bool
    """True when path looks like one checkpoint (a step-N name or format files inside), not a root."""
    name = os.path.basename(os.path.normpath(path))
    if parse_step_dirname(name) is not None:
        return True
    return os.path.exists(os.path.join(path, SUMS_NAME)) or os.path.exists(os.path.join(path, MANIFEST_NAME))


def writer_lock_held(root):
    # type: (str) -> bool
    """True while a trainer holds the root's writer lock (an flock, dropped by the kernel when it dies)."""
    try:
        fd = os.open(os.path.join(root, WRITER_LOCK_NAME), os.O_RDONLY)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return False
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops the shared lock, when it was granted
    return False


# ----------------------------------------------------------------------------------- moving aside


def fsync_dir(path):
    # type: (str) -> None
    """Make a rename or a new entry in a directory durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def aside_target(path, kind, now=None):
    # type: (str, str, datetime.datetime | None) -> str
    """A free path next to `path` under the aside naming convention."""
    parent = os.path.dirname(os.path.normpath(path))
    base = aside_dirname(os.path.basename(os.path.normpath(path)), kind, now)
    candidate = os.path.join(parent, base)
    counter = 1
    while os.path.lexists(candidate):
        candidate = os.path.join(parent, "%s-%d" % (base, counter))
        counter += 1
    return candidate


def move_aside(path, kind, now=None):
    # type: (str, str, datetime.datetime | None) -> str
    """Rename a corrupt checkpoint or a partial save out of the way (never delete it); returns the new path."""
    target = aside_target(path, kind, now)
    os.rename(path, target)
    fsync_dir(os.path.dirname(os.path.normpath(path)))
    return target
