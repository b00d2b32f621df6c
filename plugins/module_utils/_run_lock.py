# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Runs on the controller, inside ansible-playbook's worker (the run_lock action); standard library and _files.
# ruff: noqa: UP004, UP009, UP031, RUF100
"""A run's lock on the controller: ``<runs_dir>/<run_id>/.run.lock``, held by one ansible-playbook at a time.

A run id belongs to one controller process from the start of a playbook to its end: every playbook takes the
lock before it creates, stops, terminates or changes anything, and the roles that act on a run (sync,
teardown) take it too (``held`` when their playbook already has it). A run that cannot take it changes
nothing.

The lock is a directory made with ``mkdir`` (atomic) holding ``owner``: ``host=``, ``pid=`` of the
ansible-playbook, ``start=`` (that process's start time in clock ticks since boot, /proc/<pid>/stat field 22)
and ``boot=`` (/proc/sys/kernel/random/boot_id), so a pid reused by another process, or a pid of a former
boot, is not mistaken for the holder; ``play=``, ``time=`` (epoch seconds) and ``since=`` (UTC) for people.

``acquire`` returns ``acquired``, ``held`` (this very owner already holds it) or ``took-over`` (a lock of this
host whose process is gone, taken over at once: moved aside, then made again, so that of two controllers
taking over at once only one wins); a live holder's lock, and any lock of another host (whose process cannot be
looked at from here), raises LockHeld naming the holder. ``release`` removes the lock only for its owner, and
the run directory with it when nothing else is in it.
"""

from __future__ import absolute_import, division, print_function

import contextlib
import datetime
import os
import shutil
import time

from ansible_collections.trainops.gpu.plugins.module_utils._files import atomic_write

LOCK_NAME = ".run.lock"
OWNER_NAME = "owner"
OWNER_FIELDS = ("host", "pid", "start", "boot", "play", "time", "since")


class LockHeld(Exception):
    """Another owner holds the lock; the message names it."""


def lock_path(runs_dir, run_id):
    # type: (str, str) -> str
    return os.path.join(runs_dir, run_id, LOCK_NAME)


def _read(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return ""


def boot_id():
    # type: () -> str
    return _read("/proc/sys/kernel/random/boot_id")


def process_start(pid):
    # type: (str) -> str
    """The process's start time in clock ticks since boot, or '' when there is no such process."""
    stat = _read("/proc/%s/stat" % pid) if str(pid).isdigit() else ""
    # The command name (field 2) is in parentheses and may hold spaces: count fields after the last ')'.
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else ""


def owner_of(host, pid, play=""):
    # type: (str, str, str) -> dict
    """The owner record of a live process of this host."""
    return {"host": str(host), "pid": str(pid), "start": process_start(pid), "boot": boot_id(), "play": play}


def read_owner(lock):
    # type: (str) -> dict
    """The owner file's fields; empty strings while it is missing or being written."""
    fields = dict.fromkeys(OWNER_FIELDS, "")
    try:
        with open(os.path.join(lock, OWNER_NAME)) as handle:
            for line in handle:
                key, sep, value = line.rstrip("\n").partition("=")
                if sep and key in fields:
                    fields[key] = value
    except (IOError, OSError):
        pass
    return fields


def describe(owner):
    # type: (dict) -> str
    text = "host=%s pid=%s since=%s" % (owner["host"] or "?", owner["pid"] or "?", owner["since"] or "?")
    return text + (" play=%r" % owner["play"] if owner.get("play") else "")


def _same_owner(owner, me):
    return owner["host"] == me["host"] and owner["pid"] == me["pid"] and owner["start"] == me["start"]


def holder_alive(owner, host):
    # type: (dict, str) -> object
    """True or False for a holder of this host; None for another host's (its processes cannot be seen)."""
    if owner["host"] != str(host):
        return None
    if not owner["pid"].isdigit():
        return False
    if owner["boot"] and owner["boot"] != boot_id():
        return False
    start = process_start(owner["pid"])
    if not start:
        return False
    return not owner["start"] or owner["start"] == start


def _write_owner(lock, me, now):
    since = datetime.datetime.fromtimestamp(int(now), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    record = dict(me, time="%d" % int(now), since=since)
    # UTF-8: ansible-playbook, whose worker runs this, insists on a UTF-8 locale, which read_owner's open uses.
    text = "".join("%s=%s\n" % (key, record.get(key, "")) for key in OWNER_FIELDS).encode("utf-8")
    atomic_write(os.path.join(lock, OWNER_NAME), lambda handle: handle.write(text))


def acquire(lock, me, now=None, dry_run=False):
    # type: (str, dict, object, bool) -> tuple
    """(state, previous owner or None): take the lock for ``me`` (owner_of(...)), or raise LockHeld. With
    ``dry_run`` nothing is written: the state is what taking it would give."""
    now = time.time() if now is None else now
    if dry_run:
        if not os.path.isdir(lock):
            return "acquired", None
    else:
        parent = os.path.dirname(lock)
        if parent:
            os.makedirs(parent, exist_ok=True)  # two controllers may make it at once
        try:
            os.mkdir(lock)
        except FileExistsError:
            pass
        else:
            _write_owner(lock, me, now)
            return "acquired", None
    owner = read_owner(lock)
    if _same_owner(owner, me):
        return "held", owner
    alive = holder_alive(owner, me["host"])
    if alive is False and not (owner["pid"] == "" and _young(owner, lock, now)):
        # Moved aside, not removed in place: a second controller taking over at the same moment finds the name
        # gone (its rename fails) and then meets our fresh lock in its mkdir.
        if dry_run:
            return "took-over", owner
        aside = "%s.stale-%d-%s" % (lock, int(now), me["pid"])
        try:
            os.rename(lock, aside)
            os.mkdir(lock)
        except OSError:
            pass
        else:
            _write_owner(lock, me, now)
            shutil.rmtree(aside, ignore_errors=True)
            return "took-over", owner
        owner = read_owner(lock)
    if alive is None:
        raise LockHeld(
            "%s is held by another controller (%s): its process cannot be checked from this host. If that "
            "controller is gone, remove the lock directory by hand." % (lock, describe(owner))
        )
    raise LockHeld(
        "%s is held by a running ansible-playbook (%s): one controller process owns a run id at a time. Wait for "
        "it to end, or use another run id." % (lock, describe(owner))
    )


def _young(owner, lock, now):
    """A lock whose owner file is not written yet (a taker between its mkdir and its write) is left alone for
    a few seconds."""
    try:
        return now - os.stat(lock).st_mtime < 10
    except OSError:
        return False


def release(lock, me, dry_run=False):
    # type: (str, dict, bool) -> tuple
    """(state, owner): ``released``, ``absent``, or ``not-owner`` (left in place). A run directory left empty by
    the release (the lock was all it held: the run failed before it recorded anything) is removed too."""
    if not os.path.isdir(lock):
        return "absent", None
    owner = read_owner(lock)
    if not _same_owner(owner, me):
        return "not-owner", owner
    if dry_run:
        return "released", owner
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(lock, OWNER_NAME))
    os.rmdir(lock)
    with contextlib.suppress(OSError):  # not empty (or gone): the run recorded something, or another took it
        os.rmdir(os.path.dirname(lock))
    return "released", owner
