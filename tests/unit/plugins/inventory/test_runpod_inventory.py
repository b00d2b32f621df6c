# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host variables and groups the runpod inventory derives from one pod."""

from __future__ import annotations

from ansible_collections.trainops.gpu.plugins.inventory.runpod import (
    account_cache_suffix,
    is_reserved_host_name,
    pod_groups,
    pod_hostvars,
    safe_group_part,
    without_env_values,
)
from ansible_collections.trainops.gpu.plugins.module_utils._runpod_resources import pod_summary, select_pods

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


def test_foreign_pods_named_like_ours_join_no_run_or_role_group():
    # Shaped <something>-<run>-<role>, but not our prefix: no run or role, in groups or host variables.
    for name in ("other-r1-trainer", "trainopsx-r1-trainer", "my-trainops-r1-trainer", "r1-trainer"):
        groups = pod_groups(dict(POD, name=name), "trainops")
        assert not any(g.startswith(("runpod_run_", "runpod_role_")) for g in groups), (name, groups)
        hostvars = pod_hostvars(dict(POD, name=name), "trainops")
        assert hostvars["runpod_run_id"] is None and hostvars["runpod_role"] is None
    # The prefix is an option: with run_name_prefix "other" that pod is a run's.
    assert pod_groups(dict(POD, name="other-r1-trainer"), "other")[-2:] == ["runpod_run_r1", "runpod_role_trainer"]
    assert "runpod_run_r1" not in pod_groups(dict(POD, name="trainops-r1-trainer"), "other")


def test_reserved_host_names():
    for name in ("localhost", "LocalHost", "127.0.0.1", "::1", "all", "ungrouped", "runpod", "runpod_status_running"):
        assert is_reserved_host_name(name), name
    assert is_reserved_host_name("trainers", group_names={"trainers"})
    for name in ("trainops-r1-trainer", "jupyter", "my-runpod", "allocator"):
        assert not is_reserved_host_name(name, group_names={"trainers"}), name


def test_cache_suffix_differs_by_url_and_key_and_never_holds_the_key():
    key = "rpa_SECRETKEYVALUE"
    suffix = account_cache_suffix("http://127.0.0.1:8765", key)
    assert suffix.startswith("http_127_0_0_1_8765_") and key not in suffix and "SECRET" not in suffix
    assert suffix == account_cache_suffix("http://127.0.0.1:8765", key)
    assert suffix != account_cache_suffix("http://127.0.0.1:8766", key)
    assert suffix != account_cache_suffix("http://127.0.0.1:8765", key + "2")


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
    # As the inventory calls it: an empty statuses keeps every pod.
    assert [p["id"] for p in select_pods(pods, name_prefix="trainops-", statuses=["RUNNING"])] == ["a"]
    assert sorted(p["id"] for p in select_pods(pods, statuses=[], include_terminated=True)) == ["a", "b", "c"]


def test_empty_statuses_keep_terminated_pods_in_the_inventory():
    pods = [dict(POD, id="a"), dict(POD, id="t", status="TERMINATED")]
    assert [p["id"] for p in select_pods(pods, statuses=[], include_terminated=True)] == ["a", "t"]
    assert [p["id"] for p in select_pods(pods, statuses=["TERMINATED"], include_terminated=True)] == ["t"]


def test_hostvars_are_the_module_summary_prefixed_plus_run_role_and_volume():
    pod = dict(POD, mounts={"network": [{"volumeId": "vol1", "path": "/workspace"}]})
    hostvars = pod_hostvars(pod, "trainops")
    summary = pod_summary(pod)
    assert dict((k, hostvars["runpod_" + k]) for k in summary) == summary
    assert set(hostvars) - set("runpod_" + k for k in summary) == {
        "runpod_network_volume_id",
        "runpod_run_id",
        "runpod_role",
    }
    assert hostvars["runpod_network_volume_id"] == "vol1"


def test_hostvars_of_earlier_releases_keep_their_values():
    pod = dict(
        POD,
        image="img",
        cloud="SECURE",
        cudaVersion="12.8",
        ports=["22/tcp"],
        cost=0.69,
        createdAt="2026-01-01T00:00:00Z",
        startedAt="2026-01-01T00:01:00Z",
        cpu={"id": "cpu3c"},
        mounts={"network": [{"volumeId": "vol1", "path": "/workspace"}]},
    )
    expected = dict(
        runpod_id="pod_abc",
        runpod_name="trainops-run-42-trainer",
        runpod_status="RUNNING",
        runpod_image="img",
        runpod_gpu_type="NVIDIA GeForce RTX 4090",
        runpod_gpu_count=1,
        runpod_cpu_flavor="cpu3c",
        runpod_cloud="SECURE",
        runpod_data_center_id="EU-RO-1",
        runpod_cuda_version="12.8",
        runpod_ports=["22/tcp"],
        runpod_env_keys=["SECRET"],
        runpod_network_volume_id="vol1",
        runpod_cost_per_hr=0.69,
        runpod_created_at="2026-01-01T00:00:00Z",
        runpod_started_at="2026-01-01T00:01:00Z",
        runpod_ssh_host="127.0.0.1",
        runpod_ssh_port=40022,
        runpod_run_id="run-42",
        runpod_role="trainer",
    )
    hostvars = pod_hostvars(pod, "trainops")
    assert dict((key, hostvars.get(key, "missing")) for key in expected) == expected


def test_env_values_are_blanked_before_caching_and_keys_kept():
    blanked = without_env_values([POD, dict(POD, id="b", env=None)])
    assert "s3cr3t-token" not in repr(blanked)
    assert blanked[0]["env"] == {"SECRET": ""} and blanked[1]["env"] is None
    assert POD["env"] == {"SECRET": "s3cr3t-token"}  # the API answer itself is not modified
    assert pod_hostvars(blanked[0], "trainops") == pod_hostvars(POD, "trainops")
