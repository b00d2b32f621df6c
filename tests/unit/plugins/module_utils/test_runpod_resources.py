# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pod names, SSH key identity, returned shapes, and catalog validation."""

from __future__ import annotations

import pytest

from ansible_collections.trainops.gpu.plugins.module_utils._runpod_resources import (
    parse_pod_name,
    placement,
    pod_summary,
    secret_env_values,
    select_pods,
    ssh_key_identity,
)
from ansible_collections.trainops.gpu.plugins.module_utils._runpod_validate import (
    placement_option_problems,
    validate_pod_body,
    validate_volume_request,
)

GPUS = [
    {"id": "NVIDIA GeForce RTX 4090", "secure": True, "community": True, "maxCount": {"secure": 8, "community": 4}},
    {"id": "NVIDIA H100 80GB HBM3", "secure": True, "community": False, "maxCount": {"secure": 8, "community": 0}},
]
DCS = [
    {"id": "EU-RO-1", "networkVolumeTypes": ["STANDARD", "HIGH_PERFORMANCE"]},
    {"id": "US-TX-3", "networkVolumeTypes": ["STANDARD"]},
    {"id": "XX-NO-1", "networkVolumeTypes": []},
]


@pytest.mark.parametrize(
    "name,expected",
    [
        ("trainops-run42-trainer", ("run42", "trainer")),
        ("trainops-2026-12-02-a-worker", ("2026-12-02-a", "worker")),
        ("trainops-run42", None),
        ("trainops--trainer", None),
        ("trainops-run42-", None),
        ("other-run42-trainer", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_pod_name(name, expected):
    assert parse_pod_name(name) == expected


def test_parse_pod_name_with_custom_prefix():
    assert parse_pod_name("lab-r1-eval", "lab") == ("r1", "eval")


def test_ssh_key_identity_ignores_comment():
    assert ssh_key_identity("ssh-ed25519 AAAAkey me@host") == ("ssh-ed25519", "AAAAkey")
    assert ssh_key_identity("ssh-ed25519 AAAAkey") == ("ssh-ed25519", "AAAAkey")
    assert ssh_key_identity("not a key") is None
    assert ssh_key_identity("ssh-ed25519") is None
    assert ssh_key_identity(None) is None


def test_pod_summary_hides_env_values():
    pod = {
        "id": "p",
        "name": "n",
        "status": "RUNNING",
        "env": {"HF_TOKEN": "hf_secret", "A": "1"},
        "gpu": {"id": "g", "count": 2},
        "mounts": {"network": [{"volumeId": "v", "path": "/workspace"}]},
        "ssh": {"direct": {"host": "127.0.0.1", "port": 2201, "username": "root", "command": "ssh"}},
    }
    summary = pod_summary(pod)
    assert summary["env_keys"] == ["A", "HF_TOKEN"]
    assert "hf_secret" not in repr(summary)
    assert (summary["ssh_host"], summary["ssh_port"], summary["gpu_count"]) == ("127.0.0.1", 2201, 2)
    assert summary["network_volume"] == {"id": "v", "path": "/workspace"}


def test_secret_env_values_by_name_and_by_secret_env():
    env = {
        "HF_TOKEN": "hf_secret_value",
        "WANDB_API_KEY": "wandb-secret",
        "db_password": "hunter22",
        "PLAIN_SETTING": "given-as-secret-env",
        "RUN_ID": "run42",
        "USE_AUTH": "1",  # too short to hunt: masking "1" would mask every 1 of the output
        "SECRET_FLAG": True,
        "EMPTY_TOKEN": "",
    }
    assert secret_env_values(env, ["PLAIN_SETTING"]) == {
        "hf_secret_value",
        "wandb-secret",
        "hunter22",
        "given-as-secret-env",
    }
    assert secret_env_values(env) == {"hf_secret_value", "wandb-secret", "hunter22"}
    assert secret_env_values(None) == set()


def test_select_pods_by_name_skips_terminated_and_other_names():
    pods = [
        {"id": "a", "name": "x", "status": "RUNNING"},
        {"id": "b", "name": "x", "status": "TERMINATED"},
        {"id": "c", "name": "xy", "status": "RUNNING"},
    ]
    assert [p["id"] for p in select_pods(pods, name="x")] == ["a"]


def body(**extra):
    base = {"name": "trainops-r-t", "image": "img", "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1}}
    base.update(extra)
    return base


def test_valid_pod_body_has_no_problems():
    assert validate_pod_body(body(dataCenterIds=["EU-RO-1"]), GPUS, DCS) == []


@pytest.mark.parametrize(
    "request_body,fragment",
    [
        (body(gpu={"id": "NVIDIA GTX 1080", "count": 1}), "unknown GPU type 'NVIDIA GTX 1080'"),
        (body(gpu={"id": "NVIDIA GeForce RTX 4090", "count": 9}), "gpu_count 9 is out of range"),
        (body(gpu={"id": "NVIDIA GeForce RTX 4090", "count": 5}, cloud="COMMUNITY"), "1..4"),
        (body(gpu={"id": "NVIDIA H100 80GB HBM3", "count": 1}, cloud="COMMUNITY"), "not offered on the COMMUNITY"),
        (body(dataCenterIds=["MARS-1"]), "unknown data center 'MARS-1'"),
        (body(mounts={"persistent": {"size": 5, "path": "/w"}}), "at least 10 GB"),
        (body(disk=0), "container_disk"),
        (body(gpu=None, cpu={"id": "cpu3c", "vcpuCount": 3}), "power of two"),
        (body(gpu={"id": "NVIDIA GeForce RTX 4090", "count": 1, "minCudaVersion": "12"}), "major.minor"),
    ],
)
def test_invalid_pod_bodies(request_body, fragment):
    problems = validate_pod_body(request_body, GPUS, DCS)
    assert any(fragment in p for p in problems), problems


def test_network_volume_outside_allowed_data_centers():
    volume = {"id": "vol1", "dataCenter": "US-TX-3"}
    request_body = body(dataCenterIds=["EU-RO-1"], mounts={"network": [{"volumeId": "vol1", "path": "/workspace"}]})
    problems = validate_pod_body(request_body, GPUS, DCS, network_volume=volume)
    assert len(problems) == 1 and "vol1" in problems[0] and "US-TX-3" in problems[0]
    assert validate_pod_body(dict(request_body, dataCenterIds=["US-TX-3"]), GPUS, DCS, network_volume=volume) == []


def test_missing_network_volume():
    request_body = body(mounts={"network": [{"volumeId": "nope", "path": "/workspace"}]})
    problems = validate_pod_body(request_body, GPUS, DCS, network_volume_missing=True)
    assert problems == ["network volume 'nope' does not exist"]


@pytest.mark.parametrize(
    "size,dc,tier,fragment",
    [
        (5, "EU-RO-1", None, "out of range: 10..4096"),
        (5000, "EU-RO-1", None, "out of range"),
        (None, "EU-RO-1", None, "size is required"),
        (20, "MARS-1", None, "unknown data center"),
        (20, "US-TX-3", "HIGH_PERFORMANCE", "not HIGH_PERFORMANCE"),
        (20, "XX-NO-1", None, "offers no network volumes"),
        (20, None, None, "data_center is required"),
    ],
)
def test_invalid_volume_requests(size, dc, tier, fragment):
    problems = validate_volume_request(size, dc, tier, DCS)
    assert any(fragment in p for p in problems), problems


def test_valid_volume_request():
    assert validate_volume_request(10, "EU-RO-1", "HIGH_PERFORMANCE", DCS) == []
    assert validate_volume_request(4096, "US-TX-3", None, DCS) == []


CATALOG_DCS = [
    {"id": "A-1", "networkVolumeTypes": ["STANDARD", "HIGH_PERFORMANCE"]},
    {"id": "B-1", "networkVolumeTypes": ["STANDARD"]},
    {"id": "C-1", "networkVolumeTypes": []},
    {"id": "D-1", "networkVolumeTypes": ["STANDARD"]},
]
GPU_STOCK = {
    "id": "g",
    "dataCenters": [
        {"id": "A-1", "name": "A", "availability": "LOW"},
        {"id": "B-1", "name": "B", "availability": "MEDIUM"},
        {"id": "C-1", "name": "C", "availability": "HIGH"},
        {"id": "D-1", "name": "D", "availability": "MEDIUM"},
        {"id": "E-1", "name": "E", "availability": "NONE"},
    ],
}


def ids(ranked):
    return [dc["id"] for dc in ranked]


def test_placement_orders_by_stock_then_the_fallback_order_then_id():
    assert ids(placement(GPU_STOCK, CATALOG_DCS)) == ["C-1", "B-1", "D-1", "A-1"]
    # Equal stock (B-1, D-1): the caller's order decides; only the listed data centers are candidates.
    assert ids(placement(GPU_STOCK, CATALOG_DCS, ["A-1", "D-1", "B-1"])) == ["D-1", "B-1", "A-1"]
    assert ids(placement(GPU_STOCK, CATALOG_DCS, ["E-1"])) == []  # no stock there
    assert ids(placement(GPU_STOCK, CATALOG_DCS, network_volume_type="STANDARD")) == ["B-1", "D-1", "A-1"]
    assert ids(placement(GPU_STOCK, CATALOG_DCS, network_volume_type="HIGH_PERFORMANCE")) == ["A-1"]
    assert placement(None, CATALOG_DCS) == [] and placement({"id": "g"}, CATALOG_DCS) == []
    assert placement(GPU_STOCK, CATALOG_DCS)[0] == {
        "id": "C-1",
        "name": "C",
        "availability": "HIGH",
        "network_volume_types": [],
    }


def test_placement_options_need_a_gpu_type_with_availability_and_known_ids():
    good = {"gpu_type": "g", "availability": True, "data_center_ids": ["A-1"], "min_cuda_version": "12.8"}
    assert placement_option_problems(good, CATALOG_DCS) == []
    assert placement_option_problems({"gpu_type": "g", "availability": False}) == []
    [problem] = placement_option_problems(dict(good, availability=False))
    assert problem.startswith("data_center_ids and min_cuda_version rank the data centers")
    assert placement_option_problems(dict(good, min_cuda_version="12")) == ["min_cuda_version '12' is not major.minor"]
    # Without the catalog the ids are not judged yet; with it an unknown one is named.
    assert placement_option_problems(dict(good, data_center_ids=["X-9"])) == []
    [problem] = placement_option_problems(dict(good, data_center_ids=["X-9", "A-1"]), CATALOG_DCS)
    assert problem == "unknown data center 'X-9'; the catalog lists: A-1, B-1, C-1, D-1"
