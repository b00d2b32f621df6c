# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sync role's controller lock (sync_lock action), on real directories."""

from __future__ import annotations

import os
import subprocess
import threading

import pytest

from ansible_collections.trainops.gpu.plugins.module_utils import _sync_lock as sl

NOW = 1_800_000_000


@pytest.fixture
def lock(tmp_path):
    return str(tmp_path / "runs" / "r1" / ".sync.lock")


def dead_pid():
    """A pid that was alive a moment ago and is gone now."""
    child = subprocess.Popen(["true"])
    child.wait()
    return str(child.pid)


def test_acquire_writes_the_owner_and_release_removes_it(lock):
    assert sl.acquire(lock, "hostA", "100", 30, now=NOW) == ("acquired", None)
    owner = sl.read_owner(lock)
    assert owner == {"host": "hostA", "pid": "100", "time": str(NOW), "since": "2027-01-15T08:00:00Z"}
    assert sl.acquire(lock, "hostA", "100", 30, now=NOW + 5)[0] == "held"
    assert sl.release(lock, "hostA", "100")[0] == "released"
    assert not os.path.exists(lock)
    assert sl.release(lock, "hostA", "100") == ("absent", None)


def test_a_live_holder_is_never_taken_over(lock):
    sl.acquire(lock, "hostA", str(os.getpid()), 30, now=NOW)
    with pytest.raises(sl.LockHeld, match=rf"locked by another sync: .* holds host=hostA pid={os.getpid()} since="):
        sl.acquire(lock, "hostA", "999999", 30, now=NOW + 3600)
    assert sl.release(lock, "hostA", "999999")[0] == "not-owner"
    assert os.path.isdir(lock)


def test_another_hosts_lock_is_never_taken_over(lock):
    sl.acquire(lock, "hostB", dead_pid(), 30, now=NOW)
    with pytest.raises(sl.LockHeld, match="host=hostB"):
        sl.acquire(lock, "hostA", "100", 30, now=NOW + 10 * 3600)


def test_a_stale_lock_of_a_dead_playbook_is_taken_over_only_when_old_enough(lock):
    gone = dead_pid()
    sl.acquire(lock, "hostA", gone, 30, now=NOW)
    with pytest.raises(sl.LockHeld, match=r"age 1799s"):
        sl.acquire(lock, "hostA", "100", 30, now=NOW + 1799)
    assert sl.acquire(lock, "hostA", "100", 30, now=NOW + 1800, dry_run=True)[0] == "took-over"
    assert sl.read_owner(lock)["pid"] == gone
    state, previous = sl.acquire(lock, "hostA", "100", 30, now=NOW + 1800)
    assert state == "took-over" and previous["pid"] == gone
    assert sl.read_owner(lock)["pid"] == "100"
    assert not [n for n in os.listdir(os.path.dirname(lock)) if "stale" in n]


def test_dry_run_writes_nothing(lock):
    assert sl.acquire(lock, "hostA", "100", 30, now=NOW, dry_run=True) == ("acquired", None)
    assert not os.path.exists(os.path.dirname(lock))
    sl.acquire(lock, "hostA", "100", 30, now=NOW)
    assert sl.release(lock, "hostA", "100", dry_run=True)[0] == "released"
    assert os.path.isdir(lock)


def test_of_many_racing_controllers_one_gets_the_lock(lock):
    results = []

    def take(pid):
        try:
            results.append(sl.acquire(lock, "hostA", str(pid), 30, now=NOW)[0])
        except sl.LockHeld:
            results.append("refused")

    threads = [threading.Thread(target=take, args=(1000 + i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == ["acquired"] + ["refused"] * 7
