# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Create tokens, the reconcile window after a create without an answer, and the local input checks."""

from __future__ import annotations

import pytest

from ansible_collections.trainops.gpu.plugins.module_utils._runpod import RunPodClient, RunPodError
from ansible_collections.trainops.gpu.plugins.module_utils._runpod_base import reconcile_window, settle_create
from ansible_collections.trainops.gpu.plugins.module_utils._runpod_resources import (
    CREATE_TOKEN_ENV,
    pod_summary,
    pods_of_create,
    pods_using_volume,
)
from ansible_collections.trainops.gpu.plugins.module_utils._runpod_validate import (
    env_problems,
    integer_problems,
    mount_path_problems,
    port_problems,
    validate_pod_body,
)


def scripted(*outcomes):
    queue = list(outcomes)

    def call():
        call.calls += 1
        outcome = queue.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    call.calls = 0
    return call


def test_a_create_without_answer_is_looked_for_over_the_window_and_never_resent():
    sleeps = []
    client = RunPodClient("k", "http://127.0.0.1:9", sleep=sleeps.append, rand=lambda: 0.5, max_retries=3)
    timeout = RunPodError("createPod", "POST", "/v2/pods", None, title="connection failed", detail="timed out")
    send = scripted(timeout)
    find = scripted([], [], [], [{"id": "p1"}])  # the slow create shows up on the fourth read
    assert settle_create(client, send, find, window_s=5) == ([{"id": "p1"}], timeout)
    assert send.calls == 1 and sleeps == [1.0, 1.0, 1.0]


def test_the_window_runs_out_before_a_resend():
    sleeps = []
    client = RunPodClient("k", "http://127.0.0.1:9", sleep=sleeps.append, rand=lambda: 0.5, max_retries=3)
    timeout = RunPodError("createPod", "POST", "/v2/pods", None, title="connection failed")
    send, find = scripted(timeout, {"id": "p2"}), scripted([], [], [], [])
    assert settle_create(client, send, find, window_s=3) == ({"id": "p2"}, None)
    assert sleeps == [1.0, 1.0, 1.0, 0.375]


def test_reconcile_window_default_and_bound():
    assert reconcile_window({"api_timeout": 1}) == 11
    assert reconcile_window({"api_timeout": 1, "reconcile_window": 4}) == 4
    assert reconcile_window({"api_timeout": 900}) == 600


def test_pods_of_create_match_token_or_name_and_hide_the_token():
    pods = [
        {"id": "a", "name": "n", "status": "RUNNING", "env": {CREATE_TOKEN_ENV: "t"}},
        {"id": "b", "name": "other", "status": "RUNNING", "env": {CREATE_TOKEN_ENV: "t"}},
        {"id": "c", "name": "n", "status": "TERMINATED"},
        {"id": "d", "name": "x", "status": "EXITED", "env": {CREATE_TOKEN_ENV: "u"}},
    ]
    assert [p["id"] for p in pods_of_create(pods, "n", "t")] == ["a", "b"]
    assert pod_summary(pods[0])["env_keys"] == []


def test_pods_using_volume_counts_stopped_pods_not_terminated_ones():
    mount = {"network": [{"volumeId": "v", "path": "/w"}]}
    pods = [
        {"id": "a", "status": "EXITED", "mounts": mount},
        {"id": "b", "status": "TERMINATED", "mounts": mount},
        {"id": "c", "status": "RUNNING"},
    ]
    assert [p["id"] for p in pods_using_volume(pods, "v")] == ["a"]


@pytest.mark.parametrize(
    "port,fragment",
    [
        ("22", "not port/protocol"),
        ("22/xyz", "not port/protocol"),
        ("22/tcp\n", "not port/protocol"),
        ("0/tcp", "1..65535"),
    ],
)
def test_bad_ports(port, fragment):
    assert fragment in port_problems([port])[0]
    assert port_problems(["22/tcp", "8888/http", "53/udp"]) == []


def test_env_names_values_and_reserved_key():
    assert env_problems({"OK_1": "v", "_x": ""}) == []
    assert len(env_problems({"1A": "v", "A-B": "v", "C": "a\x00b", CREATE_TOKEN_ENV: "t"})) == 4


def test_mount_paths_and_booleans():
    assert mount_path_problems("p", "/workspace") == []
    assert "absolute" in mount_path_problems("p", "data")[0] and "':'" in mount_path_problems("p", "/a:b")[0]
    assert integer_problems({"gpu_count": True, "disk": 1}) == ["gpu_count must be an integer, got true"]


GPUS = [
    {
        "id": "G",
        "secure": True,
        "maxCount": {"secure": 8},
        "dataCenters": [{"id": "US-TX-3", "availability": "HIGH"}, {"id": "EU-SE-1", "availability": "NONE"}],
        "cudaVersions": [{"version": "12.4", "available": True}, {"version": "12.8", "available": True}],
    }
]
DCS = [{"id": "EU-RO-1"}, {"id": "US-TX-3"}, {"id": "EU-SE-1"}]
CPUS = [{"id": "cpu3c", "vcpu": {"min": 2, "max": 32}}]


@pytest.mark.parametrize(
    "body,fragment",
    [
        ({"gpu": {"id": "G", "count": 1}, "dataCenterIds": ["EU-RO-1"]}, "not offered in data center EU-RO-1"),
        ({"gpu": {"id": "G", "count": 1}, "dataCenterIds": ["EU-SE-1"]}, "not offered in data center EU-SE-1"),
        ({"gpu": {"id": "G", "count": 1, "minCudaVersion": "99.9"}}, "no host offers CUDA 99.9 or newer"),
        ({"gpu": {"id": "G", "count": 1, "allowedCudaVersions": ["11.8"]}}, "no host offers CUDA 11.8"),
        ({"cpu": {"id": "cpu9", "vcpuCount": 4}}, "unknown cpu_flavor 'cpu9'"),
        ({"cpu": {"id": "cpu3c", "vcpuCount": 1024}}, "from 2 to 32 for cpu3c, got 1024"),
        ({"cpu": {"id": "cpu3c", "vcpuCount": 4}, "cloud": "COMMUNITY"}, "SECURE cloud only"),
    ],
)
def test_catalog_checks(body, fragment):
    problems = validate_pod_body(dict(body, name="n", image="i"), GPUS, DCS, cpu_types=CPUS)
    assert any(fragment in p for p in problems), problems


def test_catalog_checks_pass_a_good_body():
    good = {"name": "n", "image": "i", "gpu": {"id": "G", "count": 2, "minCudaVersion": "12.8"}}
    assert validate_pod_body(dict(good, dataCenterIds=["US-TX-3"]), GPUS, DCS) == []
    assert (
        validate_pod_body({"name": "n", "image": "i", "cpu": {"id": "cpu3c", "vcpuCount": 8}}, [], DCS, cpu_types=CPUS)
        == []
    )
