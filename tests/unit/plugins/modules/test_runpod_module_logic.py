# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decision logic inside the modules that needs no API: key sets, action outcomes, pod selection."""

from __future__ import annotations

from ansible_collections.trainops.gpu.plugins.module_utils._runpod_resources import select_pods
from ansible_collections.trainops.gpu.plugins.modules.runpod_pod import action_took_effect
from ansible_collections.trainops.gpu.plugins.modules.runpod_ssh_key import updated_keys

KEY_A = "ssh-ed25519 AAAAC3NzaA alice@laptop"
KEY_B = "ssh-rsa AAAAB3NzaB bob@desk"


def test_present_adds_the_key_and_keeps_others():
    assert updated_keys([KEY_A], KEY_B, "present") == [KEY_A, KEY_B]


def test_present_is_idempotent_whatever_the_comment():
    assert updated_keys([KEY_A], "ssh-ed25519 AAAAC3NzaA other-comment", "present") == [KEY_A]


def test_absent_removes_only_that_key():
    assert updated_keys([KEY_A, KEY_B, KEY_A + "-dup"], "ssh-ed25519 AAAAC3NzaA", "absent") == [KEY_B]
    assert updated_keys([KEY_B], KEY_A, "absent") == [KEY_B]


def test_action_took_effect():
    before = {"status": "RUNNING", "startedAt": "t1"}
    assert action_took_effect("stop", before, {"status": "EXITED"})
    assert not action_took_effect("stop", before, {"status": "RUNNING"})
    assert action_took_effect("start", {"status": "EXITED"}, {"status": "STARTING"})
    assert not action_took_effect("start", {"status": "EXITED"}, {"status": "EXITED"})
    assert action_took_effect("restart", before, {"status": "RUNNING", "startedAt": "t2"})
    assert not action_took_effect("restart", before, {"status": "RUNNING", "startedAt": "t1"})
    assert action_took_effect("terminate", before, None)


def test_select_pods_by_prefix_and_status():
    pods = [
        {"id": "2", "name": "trainops-r1-b", "status": "RUNNING"},
        {"id": "1", "name": "trainops-r1-a", "status": "EXITED"},
        {"id": "3", "name": "trainops-r2-a", "status": "TERMINATED"},
    ]
    assert [p["id"] for p in select_pods(pods, name_prefix="trainops-r1-")] == ["1", "2"]
    assert [p["id"] for p in select_pods(pods)] == ["1", "2"]
    assert [p["id"] for p in select_pods(pods, statuses=["TERMINATED"])] == ["3"]
    assert [p["id"] for p in select_pods(pods, name="trainops-r1-b")] == ["2"]
