# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host variables and groups the runpod inventory derives from one pod."""

from __future__ import annotations

from ansible_collections.trainops.gpu.plugins.inventory.runpod import (
    pod_groups,
    pod_hostvars,
    safe_group_part,
    select_pods,
    without_env_values,
)

POD = {
    "id": "pod_abc",
    "name": "trainops-run-42-trainer",
    "status": "RUNNING",
    "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1},
    "dataCenterId": "EU-RO-1",
    "env": {"SECRET": "s3cr3t-token"},
    "ssh": {"direct": {"host": "127.0.0.1", "port": 40022, "username": "root", "command": "ssh"}},
}


def test_groups():
    assert pod_groups(POD, "trainops") == [
        "runpod",
        "runpod_status_running",
        "runpod_gpu_nvidia_geforce_rtx_4090",
        "runpod_dc_eu_ro_1",
        "runpod_run_run_42",
        "runpod_role_trainer",
    ]


def test_groups_of_a_foreign_pod_have_no_run():
    groups = pod_groups(dict(POD, name="jupyter"), "trainops")
    assert not any(g.startswith(("runpod_run_", "runpod_role_")) for g in groups)


def test_hostvars_are_prefixed_and_hide_env_values():
    hostvars = pod_hostvars(POD, "trainops")
    assert all(key.startswith("runpod_") for key in hostvars)
    assert hostvars["runpod_run_id"] == "run-42" and hostvars["runpod_role"] == "trainer"
    assert hostvars["runpod_ssh_port"] == 40022 and hostvars["runpod_env_keys"] == ["SECRET"]
    assert "s3cr3t-token" not in repr(hostvars)


def test_safe_group_part():
    assert safe_group_part("NVIDIA H100 80GB HBM3") == "nvidia_h100_80gb_hbm3"
    assert safe_group_part("run.7/b") == "run_7_b"


def test_select_pods_filters():
    pods = [dict(POD, id="a"), dict(POD, id="b", status="EXITED"), dict(POD, id="c", name="x-1-y")]
    assert [p["id"] for p in select_pods(pods, ["RUNNING"], "trainops-")] == ["a"]
    assert [p["id"] for p in select_pods(pods, [], None)] == ["a", "b", "c"]


def test_env_values_are_blanked_before_caching_and_keys_kept():
    blanked = without_env_values([POD, dict(POD, id="b", env=None)])
    assert "s3cr3t-token" not in repr(blanked)
    assert blanked[0]["env"] == {"SECRET": ""} and blanked[1]["env"] is None
    assert POD["env"] == {"SECRET": "s3cr3t-token"}  # the API answer itself is not modified
    assert pod_hostvars(blanked[0], "trainops") == pod_hostvars(POD, "trainops")
