# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Runs on the controller, inside ansible-playbook's worker (the sync_lock action); standard library only.
# ruff: noqa: UP004, UP009, UP031, RUF100
"""The sync role's run lock on the controller: ``<runs_dir>/<run_id>/.sync.lock``.

A directory made with ``mkdir`` (atomic) holding ``owner`` (``host=``, ``pid=`` of the ansible-playbook that
holds it, ``time=`` in epoch seconds, ``since=`` in UTC). ``acquire`` returns ``acquired``, ``held`` (this very
owner already holds it) or ``took-over`` (a lock of this host whose pid is gone and which is older than the
stale age: moved aside, then made again, so that of two controllers taking over at once only one wins);
anyone else's lock raises LockHeld naming the holder. ``release`` removes the lock only for its owner.
"""

from __future__ import absolute_import, division, print_function

import datetime
import os
import shutil
import time
import contextlib

OWNER_NAME = "owner"


class LockHeld(Exception):
    """Another owner holds the lock; the message names it."""


def read_owner(lock):
    # type: (str) -> dict
    """The owner file's fields (host, pid, time, since); empty strings while it is missing or being written."""
    fields = dict.fromkeys(("host", "pid", "time", "since"), "")
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
    return "host=%s pid=%s since=%s" % (owner["host"] or "?", owner["pid"] or "?", owner["since"] or "?")


def _write_owner(lock, host, pid, now):
    since = datetime.datetime.fromtimestamp(int(now), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    tmp = os.path.join(lock, OWNER_NAME + ".tmp")
    with open(tmp, "w") as handle:
        handle.write("host=%s\npid=%s\ntime=%d\nsince=%s\n" % (host, pid, int(now), since))
    os.replace(tmp, os.path.join(lock, OWNER_NAME))


def _pid_alive(pid):
    return os.path.isdir("/proc/%s" % pid) if pid.isdigit() else False


def acquire(lock, host, pid, stale_minutes, now=None, dry_run=False):
    # type: (str, str, str, int, object, bool) -> tuple
    """(state, previous owner or None): take the lock for (host, pid), or raise LockHeld. With ``dry_run``
    nothing is written: the state is what taking it would give."""
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
            _write_owner(lock, host, pid, now)
            return "acquired", None
    owner = read_owner(lock)
    if owner["host"] == str(host) and owner["pid"] == str(pid):
        return "held", owner
    age = int(now) - int(owner["time"]) if owner["time"].isdigit() else 0
    if owner["host"] == str(host) and owner["pid"] and not _pid_alive(owner["pid"]) and age >= stale_minutes * 60:
        # Moved aside, not removed in place: a second controller taking over at the same moment finds the name
        # gone (its rename fails) and then meets our fresh lock in its mkdir.
        if dry_run:
            return "took-over", owner
        aside = "%s.stale-%d-%s" % (lock, int(now), pid)
        try:
            os.rename(lock, aside)
            os.mkdir(lock)
        except OSError:
            pass
        else:
            _write_owner(lock, host, pid, now)
            shutil.rmtree(aside, ignore_errors=True)
            return "took-over", owner
    raise LockHeld("run directory locked by another sync: %s holds %s (age %ds)" % (lock, describe(owner), age))


def release(lock, host, pid, dry_run=False):
    # type: (str, str, str, bool) -> tuple
    """(state, owner): ``released``, ``absent``, or ``not-owner`` (left in place)."""
    if not os.path.isdir(lock):
        return "absent", None
    owner = read_owner(lock)
    if owner["host"] != str(host) or owner["pid"] != str(pid):
        return "not-owner", owner
    if dry_run:
        return "released", owner
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(lock, OWNER_NAME))
    os.rmdir(lock)
    return "released", owner
