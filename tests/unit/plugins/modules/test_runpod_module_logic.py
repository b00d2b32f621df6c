# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decision logic inside the modules that needs no API: key sets, action outcomes, pod selection."""

from __future__ import annotations

from ansible_collections.trainops.gpu.plugins.module_utils._runpod_resources import select_pods
from ansible_collections.trainops.gpu.plugins.modules.runpod_pod import action_took_effect, option_problems
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


def pod_params(**given):
    """runpod_pod's parameters as AnsibleModule hands them over: every option, defaults filled in."""
    params = dict.fromkeys(
        ("id", "gpu_type", "gpu_count", "cpu_flavor", "vcpu_count", "container_disk", "persistent_volume_size"),
    )
    params.update(
        name="trainops-r1-trainer",
        gpu_type="NVIDIA GeForce RTX 4090",
        allowed_cuda_versions=None,
        min_cuda_version=None,
        network_volume_id=None,
        persistent_volume_path="/workspace",
        network_volume_path="/workspace",
        ports=None,
        wait_timeout=600,
    )
    params.update(given)
    return params


def test_a_persistent_and_a_network_volume_are_refused_naming_both():
    problems = option_problems(pod_params(persistent_volume_size=20, network_volume_id="vol-1"), None)
    assert len(problems) == 1
    assert "persistent_volume_size (20 GB) and network_volume_id (vol-1) are both set" in problems[0]
    assert "not both" in problems[0]


def test_one_volume_kind_alone_is_no_problem():
    assert option_problems(pod_params(persistent_volume_size=20), None) == []
    assert option_problems(pod_params(network_volume_id="vol-1"), None) == []
    # A role that passes an unset size as null asks for no persistent volume.
    assert option_problems(pod_params(persistent_volume_size=None, network_volume_id="vol-1"), None) == []
