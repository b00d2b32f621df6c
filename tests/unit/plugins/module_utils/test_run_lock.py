# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A run's controller lock (run_lock action), on real directories and real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from ansible_collections.trainops.gpu.plugins.module_utils import _run_lock as rl

NOW = 1_800_000_000
HOST = "hostA"


@pytest.fixture
def lock(tmp_path):
    return rl.lock_path(str(tmp_path / "runs"), "r1")


@pytest.fixture
def sleeper():
    """A live process of this host that is not this test."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield child
    child.kill()
    child.wait()


def dead_pid():
    """A pid that was alive a moment ago and is gone now."""
    child = subprocess.Popen(["true"])
    child.wait()
    return str(child.pid)


def me(pid=None, play="p"):
    return rl.owner_of(HOST, os.getpid() if pid is None else pid, play)


def test_lock_path_is_in_the_run_directory(tmp_path):
    assert rl.lock_path("/x/runs", "r1") == "/x/runs/r1/.run.lock"


def test_process_start_reads_field_22_and_is_empty_for_a_dead_pid():
    with open("/proc/self/stat") as handle:
        expected = handle.read().rpartition(")")[2].split()[19]
    assert rl.process_start(str(os.getpid())) == expected
    assert rl.process_start(dead_pid()) == ""
    assert rl.process_start("not-a-pid") == ""


def test_acquire_writes_the_owner_and_release_removes_it(lock):
    owner = me()
    assert rl.acquire(lock, owner, now=NOW) == ("acquired", None)
    written = rl.read_owner(lock)
    assert written == dict(owner, time=str(NOW), since="2027-01-15T08:00:00Z")
    assert written["start"] and written["boot"]
    assert rl.acquire(lock, owner, now=NOW + 5)[0] == "held"
    assert rl.release(lock, owner)[0] == "released"
    assert not os.path.exists(lock)
    assert rl.release(lock, owner) == ("absent", None)


def test_release_removes_the_run_directory_only_when_the_lock_was_all_it_held(lock):
    run_dir = os.path.dirname(lock)
    rl.acquire(lock, me(), now=NOW)
    assert rl.release(lock, me())[0] == "released"
    assert not os.path.exists(run_dir)  # a run that failed before it recorded anything leaves nothing
    rl.acquire(lock, me(), now=NOW)
    with open(os.path.join(run_dir, "state.json"), "w") as handle:
        handle.write("{}")
    assert rl.release(lock, me())[0] == "released"
    assert not os.path.exists(lock) and os.listdir(run_dir) == ["state.json"]


def test_a_live_holder_is_never_taken_over_and_the_message_names_it(lock, sleeper):
    holder = me(sleeper.pid, play="Smoke | create")
    rl.acquire(lock, holder, now=NOW)
    with pytest.raises(rl.LockHeld) as raised:
        rl.acquire(lock, me(), now=NOW + 3600)
    message = str(raised.value)
    assert "held by a running ansible-playbook" in message
    assert f"host={HOST} pid={sleeper.pid} since=2027-01-15T08:00:00Z play='Smoke | create'" in message
    assert rl.release(lock, me())[0] == "not-owner"
    assert os.path.isdir(lock)


def test_a_lock_of_a_gone_playbook_is_taken_over_at_once(lock):
    gone = me(dead_pid())
    rl.acquire(lock, gone, now=NOW)
    assert rl.acquire(lock, me(), now=NOW + 1, dry_run=True)[0] == "took-over"
    assert rl.read_owner(lock)["pid"] == gone["pid"]
    state, previous = rl.acquire(lock, me(), now=NOW + 1)
    assert state == "took-over" and previous["pid"] == gone["pid"]
    assert rl.read_owner(lock)["pid"] == str(os.getpid())
    assert not [n for n in os.listdir(os.path.dirname(lock)) if "stale" in n]


def test_a_reused_pid_is_not_the_holder(lock, sleeper):
    """The recorded pid lives, but it is another process now (its start time differs)."""
    reused = dict(me(sleeper.pid), start="1")
    rl.acquire(lock, reused, now=NOW)
    assert rl.acquire(lock, me(), now=NOW + 1)[0] == "took-over"


def test_a_lock_of_a_former_boot_is_taken_over(lock, sleeper):
    rl.acquire(lock, dict(me(sleeper.pid), boot="00000000-0000-0000-0000-000000000000"), now=NOW)
    assert rl.acquire(lock, me(), now=NOW + 1)[0] == "took-over"


def test_another_hosts_lock_is_never_taken_over(lock):
    rl.acquire(lock, rl.owner_of("hostB", dead_pid()), now=NOW)
    with pytest.raises(
        rl.LockHeld, match=r"held by another controller \(host=hostB .*remove the lock directory by hand"
    ):
        rl.acquire(lock, me(), now=NOW + 10 * 3600)


def test_a_lock_being_written_is_left_alone(lock):
    os.makedirs(lock)  # a taker between its mkdir and its owner file
    with pytest.raises(rl.LockHeld):
        rl.acquire(lock, me())


def test_dry_run_writes_nothing(lock):
    assert rl.acquire(lock, me(), now=NOW, dry_run=True) == ("acquired", None)
    assert not os.path.exists(os.path.dirname(lock))
    rl.acquire(lock, me(), now=NOW)
    assert rl.release(lock, me(), dry_run=True)[0] == "released"
    assert os.path.isdir(lock)


@pytest.fixture
def sleepers():
    """Eight live processes of this host: eight controllers."""
    children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _child in range(8)]
    yield children
    for child in children:
        child.kill()
        child.wait()


def race(lock, sleepers, now):
    results = []

    def take(child):
        try:
            results.append(rl.acquire(lock, me(child.pid), now=now)[0])
        except rl.LockHeld:
            results.append("refused")

    threads = [threading.Thread(target=take, args=(child,)) for child in sleepers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(results)


def test_of_many_racing_controllers_one_gets_the_lock(lock, sleepers):
    assert race(lock, sleepers, NOW) == ["acquired"] + ["refused"] * 7


def test_of_many_controllers_taking_over_one_dead_lock_one_wins(lock, sleepers):
    rl.acquire(lock, me(dead_pid()), now=NOW)
    results = race(lock, sleepers, NOW + 1)
    # One wins: the one that moved the dead lock aside (took-over), or, on a loaded machine, one whose mkdir fell
    # in the moment between that move and the mover's own mkdir (acquired; the mover is then refused).
    assert results in (["refused"] * 7 + ["took-over"], ["acquired"] + ["refused"] * 7), results
    assert rl.read_owner(lock)["pid"] in {str(child.pid) for child in sleepers}
