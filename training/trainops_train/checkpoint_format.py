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
ASIDE_UNSEALED = "unsealed"
ASIDE_KINDS = (ASIDE_CORRUPT, ASIDE_PARTIAL, ASIDE_UNSEALED)

# A checkpoint some other code wrote (a framework's directory, a torch.save file), sealed by the training
# package's seal(): SEAL_NAME and SUMS_NAME inside a directory, or next to a file as <file>.SEAL_NAME and
# <file>.SUMS_NAME. SHA256SUMS is renamed into place last: a checkpoint is sealed once it is there.
SEAL_NAME = "trainops-seal.json"
SEAL_FORMAT_NAME = "trainops-sealed"
SEAL_FORMAT_VERSION = 1
SEAL_KIND_DIRECTORY = "directory"
SEAL_KIND_FILE = "file"
# seal() writes its two files under a name holding this mark, then renames them: a name with it is never valid.
SEAL_TEMP_MARK = ".trainops-seal-tmp-"
# A file in a checkpoint root that carries no seal is listed as an unsealed checkpoint only with one of these
# suffixes (what torch.save, Lightning and safetensors write); other files are none of the root's business.
CHECKPOINT_FILE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".safetensors", ".pkl")

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
_ASIDE_RE = re.compile(r"^(.+)\.(corrupt|partial|unsealed)-([0-9]{8}T[0-9]{6}Z)(-[0-9]+)?$")
_SUMS_LINE_RE = re.compile(r"^([0-9a-f]{64}) ([ *])(.+)$")
# Payload names stay within what coreutils writes without escaping, and never hide or nest.
_PAYLOAD_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}\Z")
# A sealed checkpoint's file names are a framework's (.metadata, __0_0.distcp, epoch=1-step=20.ckpt): any
# printable ASCII but "/" and "\\" (which coreutils would escape) per path component, "/" between them.
_SEALED_COMPONENT_RE = re.compile(r"^[\x20-\x2e\x30-\x5b\x5d-\x7e]{1,255}\Z")
# The step seal() takes from a name when it is not given one: the last run of digits (checkpoint-120,
# epoch=0-step=120.ckpt, ckpt_120.pt).
_NAME_STEP_RE = re.compile(r"([0-9]+)(?!.*[0-9])")
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
    if kind not in ASIDE_KINDS:
        raise CheckpointFormatError("aside kind must be one of %s, got %r" % (", ".join(ASIDE_KINDS), kind))
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


def _native_sums_name(name):
    # type: (str) -> bool
    return name == MANIFEST_NAME or is_payload_name(name)


def parse_sums(text, name_ok=_native_sums_name):
    # type: (str, object) -> dict[str, str]
    """Name -> sha256 from SHA256SUMS text; raises CheckpointFormatError on any malformed line or on a name
    that name_ok refuses (by default the native format's: manifest.json and payload names)."""
    hashes = {}  # type: dict[str, str]
    for number, line in enumerate(text.splitlines(), 1):
        match = _SUMS_LINE_RE.match(line)
        if not match:
            raise CheckpointFormatError("%s line %d is malformed" % (SUMS_NAME, number))
        name = match.group(3)
        if not name_ok(name):  # type: ignore[operator]
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


def _manifest_file_errors(files, name_ok=is_payload_name):
    # type: (dict, object) -> list[str]
    if not files:
        return ["manifest lists no payload files"]
    errors = []
    for name, entry in files.items():
        if not name_ok(name):  # type: ignore[operator]
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


def sha256_fd(fd, label, buffer_bytes=READ_BUFFER_BYTES, deadline=None):
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
        return sha256_fd(fd, os.path.basename(path), buffer_bytes, deadline)
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
        # "native" (step-N/ with manifest.json), or a sealed checkpoint's kind: "directory" or "file"
        self.layout = "native"
        # the framework whose layout a sealed directory holds (FRAMEWORK_TRANSFORMERS), None when none is known
        self.framework = None  # type: str | None

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
            "layout": self.layout,
            "framework": self.framework,
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


def _verify_payload(dir_fd, name, sums, manifest, hash_files, deadline, report, sealed=False):
    # type: (int, str, dict[str, str] | None, dict | None, bool, float | None, CheckpointReport, bool) -> None
    """One payload file: a regular file (no link), the listed size, and (with hash_files) the listed sha256.
    A sealed checkpoint's names may be paths under dir_fd (open_relative), checked against its seal."""
    entry = {"size": None, "sha256": None, "ok": False}  # type: dict
    report.files[name] = entry
    listed = manifest["files"].get(name) if manifest is not None else None
    listed_sha = (sums or {}).get(name) or (listed or {}).get("sha256")
    if listed is not None and sums is not None and name in sums and sums[name] != listed["sha256"]:
        lists = "the seal's two lists" if sealed else "%s and %s" % (SUMS_NAME, MANIFEST_NAME)
        report.errors.append("%s: sha256 differs between %s" % (name, lists))
    try:
        fd, info = open_relative(dir_fd, name) if sealed else open_regular(name, dir_fd)
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
            says = "the seal says" if sealed else "manifest says"
            report.errors.append("%s: size %d, %s %d" % (name, info.st_size, says, listed["size"]))
            return
        if hash_files:
            try:
                entry["sha256"], _size = sha256_fd(fd, name, deadline=deadline)
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
    """Verify one checkpoint directory: SHA256SUMS, manifest schema, file set, sizes and hashes. A sealed
    checkpoint (is_sealed_checkpoint: a directory or a file some other writer made) is verify_sealed's.

    With hash_files=False only the structure, the sizes and the manifest's own hash are checked (cheap).
    Nothing is read through a symbolic link or from anything but a regular file. Once time.monotonic()
    passes deadline the verification stops: the report is then `timed_out` (neither valid nor corrupt).
    Any other failure while verifying becomes one of the report's errors, never an exception.
    """
    if is_sealed_checkpoint(path):
        return verify_sealed(path, hash_files, deadline)
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


# ------------------------------------------------------------------------------ sealed checkpoints
#
# A sealed checkpoint is what another writer (a framework, torch.save) left, with the seal around it:
#
#     checkpoint-120/                  a directory, sealed in place
#         ...the framework's files      any names (printable ASCII), subdirectories allowed, no links
#         trainops-seal.json           the seal's manifest: step, kind, files with sizes and sha256, ...
#         SHA256SUMS                   over every file and trainops-seal.json, paths relative to the directory
#     model-120.pt                     a file, sealed beside it
#     model-120.pt.trainops-seal.json
#     model-120.pt.SHA256SUMS          lists model-120.pt and model-120.pt.trainops-seal.json
#
# `cd <dir> && sha256sum -c SHA256SUMS` (or `-c model-120.pt.SHA256SUMS` beside a file) verifies either
# with no tool of ours. SHA256SUMS is renamed into place last: without it the checkpoint is not sealed.

SEAL_REQUIRED = {
    "format": str,
    "format_version": int,
    "kind": str,
    "step": int,
    "world_size": int,
    "files": dict,
    "created_at": str,
}
SEAL_OPTIONAL = {
    "run_id": (str, type(None)),
    "config_hash": (str, type(None)),
    "producer": dict,
    "captured": dict,
}
SEAL_MAX_DEPTH = 16


def sealed_relpath_ok(path):
    # type: (object) -> bool
    """A file name a seal may list: "/"-separated components of printable ASCII (no "\\"), none "." or "..",
    and never a name the seal itself uses while writing."""
    if not isinstance(path, str) or SEAL_TEMP_MARK in path:
        return False
    parts = path.split("/")
    return len(parts) <= SEAL_MAX_DEPTH and all(
        _SEALED_COMPONENT_RE.match(part) and part not in (".", "..") for part in parts
    )


def step_from_name(name):
    # type: (str) -> int | None
    """The last run of digits in a name (checkpoint-120, epoch=0-step=120.ckpt), or None."""
    match = _NAME_STEP_RE.search(name)
    return int(match.group(1)) if match else None


class SealPaths(object):
    """Where a checkpoint's seal lives: inside a directory, beside a file."""

    def __init__(self, path, kind):
        # type: (str, str) -> None
        self.path = os.path.normpath(path)
        self.kind = kind
        if kind == SEAL_KIND_DIRECTORY:
            self.base = self.path
            self.sums_name, self.seal_name = SUMS_NAME, SEAL_NAME
        else:
            self.base = os.path.dirname(self.path) or "."
            name = os.path.basename(self.path)
            self.sums_name, self.seal_name = "%s.%s" % (name, SUMS_NAME), "%s.%s" % (name, SEAL_NAME)
        self.sums = os.path.join(self.base, self.sums_name)
        self.seal = os.path.join(self.base, self.seal_name)

    def owns(self, name):
        # type: (str) -> bool
        """Whether a listed name is the seal's own (its manifest), not a payload file."""
        return name == self.seal_name


def seal_paths(path):
    # type: (str) -> SealPaths
    """The seal's paths for a checkpoint directory or file (a missing path is taken as a file)."""
    kind = SEAL_KIND_DIRECTORY if os.path.isdir(path) and not os.path.islink(path) else SEAL_KIND_FILE
    return SealPaths(path, kind)


def seal_manifest_errors(manifest, kind=None):
    # type: (object, str | None) -> list[str]
    """Everything wrong with a parsed trainops-seal.json; empty when it follows the schema."""
    if not isinstance(manifest, dict):
        return ["%s is not a JSON object" % SEAL_NAME]
    errors = []
    for key, kinds in list(SEAL_REQUIRED.items()) + list(SEAL_OPTIONAL.items()):
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        if key not in manifest:
            if key in SEAL_REQUIRED:
                errors.append("%s lacks %r" % (SEAL_NAME, key))
        elif not isinstance(manifest[key], kinds) or (isinstance(manifest[key], bool) and bool not in kinds):
            errors.append("%s %r has the wrong type" % (SEAL_NAME, key))
    if errors:
        return errors
    if manifest["format"] != SEAL_FORMAT_NAME:
        errors.append("%s format is %r, expected %r" % (SEAL_NAME, manifest["format"], SEAL_FORMAT_NAME))
    if manifest["format_version"] != SEAL_FORMAT_VERSION:
        errors.append("%s format_version %d is not %d" % (SEAL_NAME, manifest["format_version"], SEAL_FORMAT_VERSION))
    if manifest["kind"] not in (SEAL_KIND_DIRECTORY, SEAL_KIND_FILE):
        errors.append("%s kind %r is not %r or %r" % (SEAL_NAME, manifest["kind"], SEAL_KIND_DIRECTORY, SEAL_KIND_FILE))
    elif kind is not None and manifest["kind"] != kind:
        errors.append("%s says kind %r, but the checkpoint is a %s" % (SEAL_NAME, manifest["kind"], kind))
    if manifest["step"] < 0:
        errors.append("%s step is negative" % SEAL_NAME)
    if manifest["world_size"] < 1:
        errors.append("%s world_size %d is not at least 1" % (SEAL_NAME, manifest["world_size"]))
    if not is_rfc3339(manifest["created_at"]):
        errors.append("%s created_at %r is not an RFC 3339 timestamp" % (SEAL_NAME, manifest["created_at"][:64]))
    return errors + _manifest_file_errors(manifest["files"], sealed_relpath_ok)


def open_relative(base_fd, relpath):
    # type: (int, str) -> tuple[int, os.stat_result]
    """open_regular of a "/"-separated path under base_fd, no component followed through a symbolic link."""
    parts = relpath.split("/")
    dir_fd = base_fd
    try:
        for part in parts[:-1]:
            try:
                next_fd = os.open(part, _OPEN_DIR_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    problem = "%s: a component is a symbolic link or not a directory" % relpath
                    raise CheckpointFormatError(problem) from None
                raise
            if dir_fd != base_fd:
                os.close(dir_fd)
            dir_fd = next_fd
        try:
            return open_regular(parts[-1], dir_fd)
        except CheckpointFormatError:
            raise CheckpointFormatError("%s: is a symbolic link or not a regular file" % relpath) from None
    finally:
        if dir_fd != base_fd:
            os.close(dir_fd)


def _walk_files(dir_fd, prefix, found, problems, depth=0):
    # type: (int, str, list[str], list[str], int) -> None
    """The regular files under dir_fd ("/"-joined paths); links and other kinds of entries are problems."""
    for name in sorted(os.listdir(dir_fd)):
        rel = prefix + name
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            problems.append("%s: is a symbolic link" % rel)
        elif stat.S_ISDIR(info.st_mode):
            if depth + 1 >= SEAL_MAX_DEPTH:
                problems.append("%s: nests deeper than %d levels" % (rel, SEAL_MAX_DEPTH))
                continue
            sub_fd = os.open(name, _OPEN_DIR_FLAGS, dir_fd=dir_fd)
            try:
                _walk_files(sub_fd, rel + "/", found, problems, depth + 1)
            finally:
                os.close(sub_fd)
        elif stat.S_ISREG(info.st_mode):
            found.append(rel)
        else:
            problems.append("%s: not a regular file" % rel)


def sealed_payload(paths, base_fd=None):
    # type: (SealPaths, int | None) -> tuple[list[str], list[str]]
    """(payload files, problems) of a checkpoint as it is on disk: every regular file of a directory but the
    seal's own two (and seal temporaries, which are problems), or the one file."""
    if paths.kind == SEAL_KIND_FILE:
        return [os.path.basename(paths.path)], []
    found, problems = [], []  # type: list[str], list[str]
    own_fd = base_fd if base_fd is not None else os.open(paths.path, _OPEN_DIR_FLAGS)
    try:
        _walk_files(own_fd, "", found, problems)
    finally:
        if base_fd is None:
            os.close(own_fd)
    payload = []
    for name in found:
        if name in (SUMS_NAME, SEAL_NAME):
            continue
        if SEAL_TEMP_MARK in name:
            problems.append("%s: the remains of a seal that did not finish" % name)
        else:
            payload.append(name)
    return payload, problems


def _sealed_kind(path, report):
    # type: (str, CheckpointReport) -> str | None
    try:
        info = os.lstat(path.rstrip("/") or "/")
    except OSError:
        info = None
    if info is not None and stat.S_ISLNK(info.st_mode):
        report.errors.append("is a symbolic link")
    elif info is not None and stat.S_ISDIR(info.st_mode):
        return SEAL_KIND_DIRECTORY
    elif info is None or stat.S_ISREG(info.st_mode):
        return SEAL_KIND_FILE  # a missing file with a seal beside it is reported missing below
    else:
        report.errors.append("not a regular file or directory")
    return None


def _read_seal(base_fd, paths, report):
    # type: (int, SealPaths, CheckpointReport) -> tuple[dict[str, str] | None, dict | None]
    """(SHA256SUMS, the seal's manifest) as far as they parse; records what is wrong with them."""
    sums = None
    try:
        text = _read_small(paths.sums_name, SUMS_MAX_BYTES, base_fd).decode("utf-8")
        sums = parse_sums(text, lambda name: paths.owns(name) or sealed_relpath_ok(name))
    except (CheckpointFormatError, UnicodeDecodeError) as exc:
        report.errors.append("%s unreadable: %s" % (paths.sums_name, exc))
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            report.errors.append("%s unreadable: %s" % (paths.sums_name, exc.strerror))
        elif os.path.lexists(paths.seal):
            report.errors.append("%s missing: the seal did not finish (torn seal)" % paths.sums_name)
        else:
            report.errors.append("%s missing: not sealed" % paths.sums_name)
    manifest = None
    try:
        raw = _read_small(paths.seal_name, MANIFEST_MAX_BYTES, base_fd)
        report.manifest_sha256 = hashlib.sha256(raw).hexdigest()
        parsed = parse_manifest(raw)
        schema_errors = seal_manifest_errors(parsed, paths.kind)
        report.errors.extend(schema_errors)
        manifest = None if schema_errors else parsed
    except OSError as exc:
        if sums is not None or exc.errno != errno.ENOENT:
            report.errors.append("%s unreadable: %s" % (paths.seal_name, exc.strerror))
    except (CheckpointFormatError, UnicodeDecodeError, ValueError) as exc:
        report.errors.append("%s unreadable: %s" % (paths.seal_name, exc))
    if sums is not None and report.manifest_sha256 is not None:
        if paths.seal_name not in sums:
            report.errors.append("%s does not list %s" % (paths.sums_name, paths.seal_name))
        elif sums[paths.seal_name] != report.manifest_sha256:
            report.errors.append("%s: sha256 mismatch" % paths.seal_name)
    return sums, manifest


def _verify_sealed_into(report, hash_files, deadline):
    # type: (CheckpointReport, bool, float | None) -> None
    kind = _sealed_kind(report.path, report)
    if kind is None:
        return
    paths = SealPaths(report.path, kind)
    report.layout = kind
    try:
        base_fd = os.open(paths.base, _OPEN_DIR_FLAGS)
    except OSError as exc:
        report.errors.append("cannot open directory: %s" % exc.strerror)
        return
    try:
        sums, manifest = _read_seal(base_fd, paths, report)
        if manifest is None and sums is None:
            return
        report.manifest = manifest
        if manifest is not None:
            report.step = manifest["step"]
        payload, problems = sealed_payload(paths, base_fd if kind == SEAL_KIND_DIRECTORY else None)
        report.errors.extend(problems)
        listed = set(manifest["files"]) if manifest is not None else set()
        summed = set(name for name in (sums or {}) if not paths.owns(name))
        if manifest is not None and sums is not None and listed != summed:
            report.errors.append("%s and %s list different files" % (paths.sums_name, paths.seal_name))
        expected = listed | summed
        for name in payload:
            if name not in expected:
                report.errors.append("unlisted file %r" % name)
        for name in sorted(expected):
            _check_deadline(deadline, "before %s" % name)
            _verify_payload(base_fd, name, sums, manifest, hash_files, deadline, report, sealed=True)
        if kind == SEAL_KIND_DIRECTORY:
            report.framework = framework_of(expected)
            if report.framework == FRAMEWORK_TRANSFORMERS:
                report.errors.extend(transformers_layout_errors(expected, _small_reader(base_fd)))
    finally:
        os.close(base_fd)


# A Hugging Face Trainer's checkpoint-N/ (transformers' Trainer._save_checkpoint): what its resume reads. The seal
# proves the bytes are those written; this says whether what was written is a checkpoint the Trainer resumes from.
# Its weights and optimizer take several forms (Trainer._load_from_checkpoint, _load_optimizer_and_scheduler):
# whole or sharded with an index, a PEFT adapter (in a subfolder too), FSDP's files and folders, or DeepSpeed's
# global_step*/ folder, which holds the optimizer and scheduler too.
FRAMEWORK_TRANSFORMERS = "transformers"
HF_STATE_NAME = "trainer_state.json"
HF_INDEX_NAMES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
HF_INDEX_MAX_BYTES = 64 * 1024 * 1024
_HF_WEIGHTS_RE = re.compile(
    r"^(model\.safetensors|pytorch_model\.bin|(.+/)?adapter_model\.(safetensors|bin)|pytorch_model_fsdp.*)\Z"
)
_HF_OPTIMIZER_RE = re.compile(r"^(optimizer\.(pt|bin)|optimizer_[0-9]+/.+)\Z")
_HF_DEEPSPEED_RE = re.compile(r"^global_step[0-9]+/")
_HF_RNG_RE = re.compile(r"^rng_state(_[0-9]+)?\.pth\Z")


def _small_reader(base_fd):
    """read(name): the bytes of a small file of the directory base_fd (an index of shards, say)."""

    def read(name):
        return _read_small(name, HF_INDEX_MAX_BYTES, base_fd)

    return read


def framework_of(names):
    # type: (set[str] | list[str]) -> str | None
    """The framework whose checkpoint a sealed directory's files make (trainer_state.json: transformers)."""
    return FRAMEWORK_TRANSFORMERS if HF_STATE_NAME in names else None


def transformers_layout_errors(names, read):
    # type: (set[str], object) -> list[str]
    """What a transformers checkpoint-N/ lacks to be resumed from: its weights (model.safetensors or another form
    the Trainer loads, or an index and every shard it names), its optimizer and scheduler (optimizer.pt and
    scheduler.pt, or DeepSpeed's global_step*/ folder) and its RNG state; read(name) gives a file's bytes."""
    errors = []
    indexes = [name for name in HF_INDEX_NAMES if name in names]
    deepspeed = any(_HF_DEEPSPEED_RE.match(name) for name in names)
    if not indexes and not deepspeed and not any(_HF_WEIGHTS_RE.match(name) for name in names):
        errors.append("model.safetensors missing (nor an index of shards): a transformers checkpoint without weights")
    for index in indexes:
        try:
            weight_map = json.loads(read(index).decode("utf-8")).get("weight_map")
            shards = sorted(set(weight_map.values()))
        except (OSError, ValueError, AttributeError, TypeError) as exc:
            errors.append("%s unreadable: %s" % (index, exc))
            continue
        errors.extend("%s missing: %s names it" % (shard, index) for shard in shards if shard not in names)
    if not deepspeed:
        if not any(_HF_OPTIMIZER_RE.match(name) for name in names):
            errors.append("optimizer.pt missing: the Trainer resumes from it (saved with save_only_model?)")
        if "scheduler.pt" not in names:
            errors.append("scheduler.pt missing: the Trainer resumes from it (saved with save_only_model?)")
    if not [name for name in names if _HF_RNG_RE.match(name)]:
        errors.append("rng_state.pth missing: the Trainer restores the RNG from it")
    return errors


def is_sealed_checkpoint(path):
    # type: (str) -> bool
    """Whether path is (or claims to be) a sealed checkpoint rather than one in the native format: a file,
    or a directory with a seal manifest, or a directory without manifest.json that is not named step-N."""
    normalized = os.path.normpath(path)
    if os.path.islink(normalized):
        return False
    if os.path.isdir(normalized):
        if os.path.lexists(os.path.join(normalized, SEAL_NAME)):
            return True
        return parse_step_dirname(os.path.basename(normalized)) is None and not os.path.lexists(
            os.path.join(normalized, MANIFEST_NAME)
        )
    paths = SealPaths(normalized, SEAL_KIND_FILE)
    return any(os.path.lexists(name) for name in (normalized, paths.sums, paths.seal))


def verify_sealed(path, hash_files=True, deadline=None):
    # type: (str, bool, float | None) -> CheckpointReport
    """Verify one sealed checkpoint (a directory or a file; see the section's comment), like
    verify_checkpoint: every failure is one of the report's errors, a passed deadline makes it timed_out."""
    report = CheckpointReport(path)
    report.step = None
    try:
        _check_deadline(deadline, "before it started")
        _verify_sealed_into(report, hash_files, deadline)
    except VerifyTimeout as exc:
        report.timed_out = True
        report.errors.append("verification timed out: %s" % exc)
    except Exception as exc:  # one checkpoint's failure, whatever it is, is that checkpoint's error
        report.errors.append("verification failed: %s: %s" % (type(exc).__name__, exc))
    return report


def peek_sealed_step(path):
    # type: (str) -> int | None
    """The step a sealed checkpoint's manifest claims (read without verifying: to order candidates only),
    else the last number in its name."""
    paths = seal_paths(path)
    try:
        manifest = parse_manifest(_read_small(paths.seal, MANIFEST_MAX_BYTES))
        step = manifest.get("step") if isinstance(manifest, dict) else None
        if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
            return step
    except (OSError, CheckpointFormatError, UnicodeDecodeError, ValueError):
        pass
    return step_from_name(os.path.basename(paths.path))


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
        self.unsealed = []  # type: list[dict]
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
            "unsealed": [dict(entry) for entry in self.unsealed],
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


def _sidecar_of(name):
    # type: (str) -> str | None
    """The file a sealed file's SHA256SUMS or seal manifest sits beside, from the sidecar's name."""
    for suffix in ("." + SUMS_NAME, "." + SEAL_NAME):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return None


def _scan_other(root, name, sealed, report):
    # type: (str, str, set[str], RootReport) -> None
    """An entry that is not the native format's: a sealed checkpoint (or a seal's sidecar) joins `sealed`;
    anything else that could be a checkpoint is listed unsealed (hidden names and the lock excepted)."""
    full = os.path.join(root, name)
    owner = _sidecar_of(name)
    if owner is not None:
        sealed.add(os.path.join(root, owner))
    elif name.startswith(".") or SEAL_TEMP_MARK in name:
        return
    elif os.path.islink(full):
        if os.path.isdir(full) or name.endswith(CHECKPOINT_FILE_SUFFIXES):
            report.unsealed.append({"path": full, "step": step_from_name(name), "why": "a symbolic link"})
    elif os.path.isdir(full):
        if os.path.lexists(os.path.join(full, SUMS_NAME)) or os.path.lexists(os.path.join(full, SEAL_NAME)):
            sealed.add(full)
        else:
            report.unsealed.append({"path": full, "step": step_from_name(name), "why": "no %s" % SUMS_NAME})
    elif os.path.isfile(full) and full not in sealed:
        paths = SealPaths(full, SEAL_KIND_FILE)
        if os.path.lexists(paths.sums) or os.path.lexists(paths.seal):
            sealed.add(full)
        elif name.endswith(CHECKPOINT_FILE_SUFFIXES):
            report.unsealed.append({"path": full, "step": step_from_name(name), "why": "no %s" % paths.sums_name})


def _scan_root(root, report):
    # type: (str, RootReport) -> tuple[dict[int, str], list[str], list[str]]
    """(canonical step -> path, paths of step-<digits> entries spelled otherwise, sealed checkpoints of other
    names); files the rest in report."""
    steps = {}  # type: dict[int, str]
    odd = []  # type: list[str]
    sealed = set()  # type: set[str]
    for name in sorted(os.listdir(root)):
        full = os.path.join(root, name)
        # a regular file named like a step directory is a sealed file's business, not the native format's
        not_file = os.path.islink(full) or not os.path.isfile(full)
        step = parse_step_dirname(name) if not_file else None
        if step is not None:
            steps[step] = full
        elif not_file and _STEP_LIKE_RE.match(name):
            # step-3/ sealed (a user's own name) is a sealed checkpoint; unsealed, a misspelled native one
            if not os.path.lexists(os.path.join(full, MANIFEST_NAME)) and any(
                os.path.lexists(os.path.join(full, own)) for own in (SEAL_NAME, SUMS_NAME)
            ):
                sealed.add(full)
            else:
                odd.append(full)
        elif parse_temp_dirname(name) is not None:
            report.stray_temp.append(full)
        elif parse_deleting_dirname(name) is not None:
            report.deleting.append(full)
        elif parse_aside_dirname(name) is not None:
            report.aside.append(full)
        elif name == LATEST_NAME:
            report.latest_hint = read_latest_hint(root)
        elif name != WRITER_LOCK_NAME:
            _scan_other(root, name, sealed, report)
    report.unsealed = [entry for entry in report.unsealed if entry["path"] not in sealed]
    return steps, odd, sorted(sealed)


def verify_root(root, stop_at_first_valid=False, hash_files=True, deadline=None, include_sealed=True):
    # type: (str, bool, bool, float | None, bool) -> RootReport
    """Verify every committed checkpoint under root, newest first, and check the manifest chain.

    A checkpoint whose predecessor is present, and vouched for by the predecessor's own SHA256SUMS, must
    name that predecessor's manifest hash; a pruned predecessor leaves the link unchecked. With
    stop_at_first_valid, older checkpoints than the newest valid one are listed in `unverified`. When
    time.monotonic() passes deadline, the checkpoint being verified is named in `timed_out` and the older
    ones are listed in `unverified`. A step-<digits> directory spelled other than its step's canonical
    name is reported last, invalid ("non-canonical name"), never ignored.

    Sealed checkpoints of other names (a framework's checkpoint-120/, a torch.save file with its seal
    beside it) take their place among the native ones by the step their seal claims (then by name);
    entries that could be checkpoints but carry no seal are listed in `unsealed`, never verified. With
    include_sealed=False only the native format's checkpoints are verified (the reference trainer's resume).
    """
    report = RootReport(root)
    if not os.path.isdir(root):
        raise CheckpointFormatError("checkpoint root %s is not a directory" % root)
    steps, odd, sealed = _scan_root(root, report)
    if not include_sealed:
        sealed, report.unsealed = [], []
    ordered = [(step, os.path.basename(path), path) for step, path in steps.items()]
    for path in sealed:
        step = peek_sealed_step(path)
        ordered.append((-1 if step is None else step, os.path.basename(path), path))
    found_valid = False
    for entry in sorted(ordered, reverse=True):
        path = entry[2]
        if report.timed_out is not None or (found_valid and stop_at_first_valid):
            report.unverified.append(path)
            continue
        checkpoint = verify_checkpoint(path, hash_files=hash_files, deadline=deadline)
        if checkpoint.timed_out:
            report.timed_out = checkpoint.path
        elif checkpoint.valid and checkpoint.layout == "native":
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
    return any(os.path.exists(os.path.join(path, own)) for own in (SUMS_NAME, MANIFEST_NAME, SEAL_NAME))


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


def move_checkpoint_aside(path, kind, layout, now=None):
    # type: (str, str, str, datetime.datetime | None) -> str
    """move_aside for any checkpoint: a sealed file goes with its seal beside it (all three under the same
    stamp), so that no seal is left behind without its file. Returns where the checkpoint went (its path
    when only the seal was left of it)."""
    when = now or datetime.datetime.now(datetime.timezone.utc)
    moved = move_aside(path, kind, when) if os.path.lexists(path) else path
    if layout == SEAL_KIND_FILE:
        paths = SealPaths(path, SEAL_KIND_FILE)
        for sidecar in (paths.sums, paths.seal):
            if os.path.lexists(sidecar):
                move_aside(sidecar, kind, when)
    return moved
