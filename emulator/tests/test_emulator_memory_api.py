"""The v2 API on the memory backend: auth, validation, the state machine, volumes, keys, admin."""

from __future__ import annotations

import http.client
import time

import pytest
from emulator_helpers import GPU, gpu_pod_body, read_events
from runpod_emulator.testing import EmulatorProcess

SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB7v0vbBPx6cRvtmn4rEyQcW1cBW3fF+Zd9U1ySiagsM test@host"


def create(emu: EmulatorProcess, **body) -> dict:
    status, _headers, pod = emu.api("POST", "/v2/pods", gpu_pod_body(**body))
    assert status == 201, pod
    return pod


def test_requests_without_the_key_get_401_problem(memory_emulator):
    connection = http.client.HTTPConnection("127.0.0.1", memory_emulator.port, timeout=10)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {memory_emulator.api_key}"}):
        connection.request("GET", "/v2/pods", headers=headers)
        response = connection.getresponse()
        body = response.read()
        assert response.status == 401
        assert response.getheader("Content-Type") == "application/problem+json"
        assert b'"status": 401' in body
    connection.request("GET", "/_emulator/requests")
    response = connection.getresponse()
    response.read()
    assert response.status == 401


def test_status_walks_to_running_and_ssh_appears_only_then(memory_emulator):
    memory_emulator.api("PUT", "/v2/account/ssh-keys", {"keys": [SSH_KEY]})
    pod = create(memory_emulator, startSsh=True)
    assert pod["status"] == "PROVISIONING"
    assert pod["ssh"] == {"proxy": None, "direct": None}
    assert pod["actions"] == ["stop", "terminate"]
    seen = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        current = memory_emulator.api("GET", f"/v2/pods/{pod['id']}")[2]
        if not seen or seen[-1] != current["status"]:
            seen.append(current["status"])
        if current["status"] != "RUNNING":
            assert current["ssh"]["direct"] is None
            assert current["runtime"] is None
        if current["status"] == "RUNNING" and current["ssh"]["direct"]:
            break
        time.sleep(0.02)
    assert seen == ["PROVISIONING", "STARTING", "RUNNING"]
    assert current["actions"] == ["stop", "restart", "terminate"]
    assert current["ssh"]["direct"]["host"] == "127.0.0.1"
    assert current["startedAt"] is not None


def test_without_start_ssh_no_ssh_endpoint(memory_emulator):
    memory_emulator.api("PUT", "/v2/account/ssh-keys", {"keys": [SSH_KEY]})
    pod = create(memory_emulator)
    running = memory_emulator.wait_for(pod["id"], lambda p: p["status"] == "RUNNING")
    time.sleep(0.3)
    assert memory_emulator.api("GET", f"/v2/pods/{pod['id']}")[2]["ssh"]["direct"] is None
    assert running["runtime"]["ports"][0]["private"] == 22


def test_actions_follow_the_status_and_invalid_ones_get_409(memory_emulator):
    pod = create(memory_emulator)
    pod_id = pod["id"]
    status, _h, problem = memory_emulator.api("POST", f"/v2/pods/{pod_id}/action", {"action": "start"})
    assert status == 409 and "not valid" in problem["detail"]
    memory_emulator.wait_for(pod_id, lambda p: p["status"] == "RUNNING")
    status, _h, stopped = memory_emulator.api("POST", f"/v2/pods/{pod_id}/action", {"action": "stop"})
    assert status == 200 and stopped["status"] == "EXITED" and stopped["cost"] == 0.0
    assert stopped["actions"] == ["start", "terminate"] and stopped["runtime"] is None
    status, _h, started = memory_emulator.api("POST", f"/v2/pods/{pod_id}/action", {"action": "start"})
    assert status == 200 and started["status"] in ("STARTING", "RUNNING")
    memory_emulator.wait_for(pod_id, lambda p: p["status"] == "RUNNING")
    status, _h, body = memory_emulator.api("POST", f"/v2/pods/{pod_id}/action", {"action": "terminate"})
    assert status == 204 and body is None
    assert memory_emulator.api("GET", f"/v2/pods/{pod_id}")[0] == 404
    assert memory_emulator.api("GET", "/v2/pods")[2] == {"pods": []}


def test_port_changes_on_every_start(memory_emulator):
    memory_emulator.api("PUT", "/v2/account/ssh-keys", {"keys": [SSH_KEY]})
    pod_id = create(memory_emulator, startSsh=True)["id"]
    ports = []
    for _round in range(3):
        running = memory_emulator.wait_for(pod_id, lambda p: p["ssh"]["direct"] is not None)
        ports.append(running["ssh"]["direct"]["port"])
        memory_emulator.api("POST", f"/v2/pods/{pod_id}/action", {"action": "stop"})
        memory_emulator.api("POST", f"/v2/pods/{pod_id}/action", {"action": "start"})
    assert len(set(ports)) == 3


def test_locked_pod_cannot_stop(memory_emulator):
    pod_id = create(memory_emulator)["id"]
    memory_emulator.wait_for(pod_id, lambda p: p["status"] == "RUNNING")
    status, _h, patched = memory_emulator.api("PATCH", f"/v2/pods/{pod_id}", {"locked": True, "name": "renamed"})
    assert status == 200 and patched["locked"] and patched["name"] == "renamed"
    assert memory_emulator.api("POST", f"/v2/pods/{pod_id}/action", {"action": "stop"})[0] == 409


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"name": "x", "image": "i", "gpu": {"id": GPU}, "bogus": 1}, 422, "'bogus' not allowed"),
        ({"name": "x", "image": "i", "gpu": {"id": GPU, "count": 0}}, 422, "$.gpu.count: must be >= 1"),
        ({"name": "", "image": "i", "gpu": {"id": GPU}}, 422, "$.name"),
        ({"name": "x", "gpu": {"id": GPU}}, 422, "'image'"),
        ({"name": "x", "image": "i", "gpu": {"id": GPU}, "cloud": "MOON"}, 422, "$.cloud"),
        ({"name": "x", "image": "i", "gpu": {"id": GPU}, "ports": ["22"]}, 422, "$.ports[0]"),
        ({"name": "x", "image": "i", "gpu": {"id": GPU}, "env": {"A": 1}}, 422, "$.env.A"),
        ({"name": "x", "image": "i", "gpu": {"id": GPU}, "cpu": {"id": "cpu3c", "vcpuCount": 2}}, 400, "not both"),
        ({"name": "x", "image": "i"}, 400, "exactly one of gpu or cpu"),
        (
            {
                "name": "x",
                "image": "i",
                "gpu": {"id": GPU},
                "mounts": {"persistent": {"size": 10, "path": "/w"}, "network": [{"volumeId": "v", "path": "/n"}]},
            },
            400,
            "mutually exclusive",
        ),
        (
            {
                "name": "x",
                "image": "i",
                "cpu": {"id": "cpu3c", "vcpuCount": 2},
                "mounts": {"persistent": {"size": 10, "path": "/w"}},
            },
            400,
            "CPU pods",
        ),
        ({"name": "x", "image": "i", "cpu": {"id": "cpu3c", "vcpuCount": 6}}, 400, "power of two"),
        ({"name": "x", "image": "i", "gpu": {"id": "NVIDIA Z9000"}}, 400, "unknown GPU type"),
        ({"name": "x", "image": "i", "gpu": {"id": GPU, "count": 9}}, 400, "exceeds"),
        (
            {"name": "x", "image": "i", "gpu": {"id": GPU, "allowedCudaVersions": ["12.8"], "minCudaVersion": "12.4"}},
            400,
            "mutually",
        ),
        ({"name": "x", "image": "i", "gpu": {"id": GPU}, "dataCenterIds": ["MARS-1"]}, 400, "unknown data center"),
        ({"name": "x", "image": "i", "gpu": {"id": "NVIDIA RTX A6000"}}, 400, "no host can place"),
        ({"name": "x", "image": "i", "gpu": {"id": GPU}, "templateId": "tpl"}, 404, "template"),
    ],
)
def test_bad_create_requests_are_refused_before_anything_exists(memory_emulator, body, status, needle):
    got, headers, problem = memory_emulator.api("POST", "/v2/pods", body)
    assert got == status, problem
    assert headers["Content-Type"] == "application/problem+json"
    assert problem["status"] == status and needle in problem["detail"]
    assert memory_emulator.api("GET", "/v2/pods")[2] == {"pods": []}


def test_malformed_json_is_400(memory_emulator):
    connection = http.client.HTTPConnection("127.0.0.1", memory_emulator.port, timeout=10)
    headers = {"Authorization": f"Bearer {memory_emulator.api_key}", "Content-Type": "application/json"}
    connection.request("POST", "/v2/pods", body=b"{not json", headers=headers)
    response = connection.getresponse()
    assert response.status == 400 and b"not valid JSON" in response.read()


def test_network_volume_crud_size_only_grows_and_data_center_is_immutable(memory_emulator):
    status, _h, volume = memory_emulator.api(
        "POST", "/v2/network-volumes", {"name": "data", "size": 20, "dataCenter": "EU-RO-1"}
    )
    assert status == 201 and volume["type"] == "STANDARD"
    vid = volume["id"]
    assert memory_emulator.api("PATCH", f"/v2/network-volumes/{vid}", {"size": 10})[0] == 400
    assert memory_emulator.api("PATCH", f"/v2/network-volumes/{vid}", {"dataCenter": "US-TX-3"})[0] == 422
    assert memory_emulator.api("PATCH", f"/v2/network-volumes/{vid}", {})[0] == 422
    status, _h, grown = memory_emulator.api("PATCH", f"/v2/network-volumes/{vid}", {"size": 40, "name": "d2"})
    assert status == 200 and grown["size"] == 40 and grown["dataCenter"] == "EU-RO-1"
    assert memory_emulator.api("GET", "/v2/network-volumes")[2]["networkVolumes"] == [grown]
    assert (
        memory_emulator.api("POST", "/v2/network-volumes", {"name": "x", "size": 5, "dataCenter": "EU-RO-1"})[0] == 422
    )
    assert memory_emulator.api("POST", "/v2/network-volumes", {"name": "x", "size": 10, "dataCenter": "NOPE"})[0] == 400
    status, _h, _b = memory_emulator.api(
        "POST", "/v2/network-volumes", {"name": "x", "size": 10, "dataCenter": "US-TX-3", "type": "HIGH_PERFORMANCE"}
    )
    assert status == 400
    assert memory_emulator.api("DELETE", f"/v2/network-volumes/{vid}")[0] == 204
    assert memory_emulator.api("GET", f"/v2/network-volumes/{vid}")[0] == 404


def test_network_volume_pins_the_data_center(memory_emulator):
    volume = memory_emulator.api("POST", "/v2/network-volumes", {"name": "d", "size": 10, "dataCenter": "US-TX-3"})[2]
    mount = {"network": [{"volumeId": volume["id"], "path": "/runpod-volume"}]}
    status, _h, problem = memory_emulator.api("POST", "/v2/pods", gpu_pod_body(mounts=mount, dataCenterIds=["EU-RO-1"]))
    assert status == 400 and "US-TX-3" in problem["detail"]
    status, _h, pod = memory_emulator.api("POST", "/v2/pods", gpu_pod_body(mounts=mount))
    assert status == 201 and pod["dataCenterId"] == "US-TX-3"
    assert memory_emulator.api("DELETE", f"/v2/network-volumes/{volume['id']}")[0] == 409
    missing = {"network": [{"volumeId": "nope", "path": "/v"}]}
    assert memory_emulator.api("POST", "/v2/pods", gpu_pod_body(mounts=missing))[0] == 404


def test_ssh_keys_put_replaces_the_set_and_validates(memory_emulator):
    assert memory_emulator.api("GET", "/v2/account/ssh-keys")[2] == {"keys": []}
    assert memory_emulator.api("PUT", "/v2/account/ssh-keys", {"keys": [SSH_KEY]})[2] == {"keys": [SSH_KEY]}
    assert memory_emulator.api("PUT", "/v2/account/ssh-keys", {"keys": ["not a key"]})[0] == 422
    assert memory_emulator.api("PUT", "/v2/account/ssh-keys", {"keys": []})[2] == {"keys": []}
    # Patterns anchor at the very end, as JSON Schema's do: a trailing newline is not let through.
    assert memory_emulator.api("PUT", "/v2/account/ssh-keys", {"keys": [SSH_KEY + "\n"]})[0] == 422
    status, _headers, problem = memory_emulator.api("POST", "/v2/pods", gpu_pod_body(ports=["22/tcp\n"]))
    assert status == 422 and "$.ports[0]" in problem["detail"], problem


def test_faults_count_and_filters(memory_emulator):
    memory_emulator.admin(
        "POST", "/_emulator/faults", {"kind": "429", "count": 2, "method": "GET", "path_prefix": "/v2/pods"}
    )
    first = memory_emulator.api("GET", "/v2/pods")
    assert first[0] == 429
    for name in ("Retry-After", "RateLimit", "RateLimit-Policy"):
        assert name in first[1]
    assert memory_emulator.api("GET", "/v2/network-volumes")[0] == 200
    assert memory_emulator.api("GET", "/v2/pods")[0] == 429
    assert memory_emulator.api("GET", "/v2/pods")[0] == 200
    memory_emulator.admin("POST", "/_emulator/faults", {"kind": "503", "rate": 1.0})
    assert memory_emulator.api("GET", "/v2/pods")[0] == 503
    memory_emulator.admin("DELETE", "/_emulator/faults")
    assert memory_emulator.api("GET", "/v2/pods")[0] == 200


def test_500_after_create_leaves_the_pod_behind(memory_emulator):
    memory_emulator.admin("POST", "/_emulator/faults", {"kind": "500_after_create", "count": 1})
    assert memory_emulator.api("GET", "/v2/pods")[0] == 200  # not a create: untouched
    status, _h, problem = memory_emulator.api("POST", "/v2/pods", gpu_pod_body(name="orphan"))
    assert status == 500 and problem["status"] == 500
    pods = memory_emulator.api("GET", "/v2/pods")[2]["pods"]
    assert [p["name"] for p in pods] == ["orphan"]


def test_500_after_create_is_not_used_up_by_a_refused_create(memory_emulator):
    memory_emulator.admin("POST", "/_emulator/faults", {"kind": "500_after_create", "count": 1})
    assert memory_emulator.api("POST", "/v2/pods", gpu_pod_body(name="bad", disk=0))[0] == 422
    assert memory_emulator.api("POST", "/v2/pods", gpu_pod_body(name="made"))[0] == 500
    assert memory_emulator.api("POST", "/v2/pods", gpu_pod_body(name="next"))[0] == 201
    names = sorted(p["name"] for p in memory_emulator.api("GET", "/v2/pods")[2]["pods"])
    assert names == ["made", "next"]


def test_fault_rate_fails_about_that_fraction_and_count_caps_it(memory_emulator):
    memory_emulator.admin("POST", "/_emulator/faults", {"kind": "503", "rate": 0.3, "seed": 11})
    statuses = [memory_emulator.api("GET", "/v2/pods")[0] for _request in range(200)]
    assert set(statuses) == {200, 503}
    assert 30 <= statuses.count(503) <= 90  # 60 expected
    memory_emulator.admin("DELETE", "/_emulator/faults")
    # count + rate: each request fails with the rate's chance until `count` of them have failed.
    memory_emulator.admin("POST", "/_emulator/faults", {"kind": "500", "rate": 0.5, "count": 3, "seed": 5})
    statuses = [memory_emulator.api("GET", "/v2/pods")[0] for _request in range(60)]
    assert statuses.count(500) == 3 and statuses.count(200) == 57
    failed_at = [index for index, status in enumerate(statuses) if status == 500]
    assert failed_at[-1] > 2, failed_at  # spread by the rate, not simply the next three requests
    assert memory_emulator.admin("GET", "/_emulator/faults") == {"faults": []}


def test_drop_and_latency_faults(memory_emulator):
    memory_emulator.admin("POST", "/_emulator/faults", {"kind": "drop", "count": 1})
    with pytest.raises((ConnectionError, http.client.RemoteDisconnected, OSError)):
        memory_emulator.api("GET", "/v2/pods")
    memory_emulator.admin("POST", "/_emulator/faults", {"kind": "latency", "latency_ms": 400, "count": 1})
    started = time.monotonic()
    assert memory_emulator.api("GET", "/v2/pods")[0] == 200
    assert time.monotonic() - started >= 0.4
    assert memory_emulator.api("POST", "/_emulator/faults", {"kind": "teapot"})[0] == 422


def test_request_record_has_no_authorization(memory_emulator):
    memory_emulator.admin("DELETE", "/_emulator/requests")
    memory_emulator.api("POST", "/v2/pods?x=1", gpu_pod_body(name="rec"))
    memory_emulator.api("GET", "/v2/pods")
    records = memory_emulator.admin("GET", "/_emulator/requests")["requests"]
    assert [(r["method"], r["path"], r["status"]) for r in records] == [
        ("POST", "/v2/pods", 201),
        ("GET", "/v2/pods", 200),
    ]
    assert records[0]["body"]["name"] == "rec" and records[0]["query"] == {"x": "1"}
    assert memory_emulator.api_key not in repr(records)


def test_restart_without_gpus_reports_zero(memory_emulator):
    pod_id = create(memory_emulator)["id"]
    memory_emulator.wait_for(pod_id, lambda p: p["status"] == "RUNNING")
    pod = memory_emulator.admin("POST", f"/_emulator/pods/{pod_id}/restart-without-gpus")
    assert pod["gpu"]["count"] == 0
    running = memory_emulator.wait_for(pod_id, lambda p: p["status"] == "RUNNING")
    assert running["gpu"]["count"] == 0 and running["runtime"]["gpus"] == []
    assert running["cost"] == pytest.approx(20 * 0.10 / 730, abs=1e-6)  # its 20 GB disk only: no GPU billed
    memory_emulator.api("POST", f"/v2/pods/{pod_id}/action", {"action": "stop"})
    restarted = memory_emulator.api("POST", f"/v2/pods/{pod_id}/action", {"action": "start"})[2]
    assert restarted["gpu"]["count"] == 1


def test_kill_is_a_host_failure(memory_emulator):
    """What tells a host failure from a stop: it takes a locked pod down too (a stop of a locked pod is a
    409), it is recorded as a host failure in the system log (never as a stop), no request to the API
    appears, the pod keeps its lock, and it can be started again."""
    emu = memory_emulator
    pod_id = create(emu)["id"]
    emu.wait_for(pod_id, lambda p: p["status"] == "RUNNING")
    assert emu.api("PATCH", f"/v2/pods/{pod_id}", {"locked": True})[0] == 200
    emu.admin("DELETE", "/_emulator/requests")
    killed = emu.admin("POST", f"/_emulator/pods/{pod_id}/kill", {"grace_s": 0})
    assert killed["status"] == "EXITED" and killed["cost"] == 0.0 and killed["locked"] is True
    assert killed["actions"] == ["start", "terminate"] and killed["runtime"] is None
    assert emu.admin("GET", "/_emulator/requests")["requests"] == []
    _status, events = read_events(emu.port, emu.api_key, f"/v2/pods/{pod_id}/logs?source=system&tail=3", 3)
    lines = [data["line"] for _event_id, data in events]
    assert lines[-1] == "pod status RUNNING -> EXITED (host failure (killed by the admin API))", lines
    assert not [line for line in lines if "stopped by the API" in line], lines
    assert emu.api("POST", f"/v2/pods/{pod_id}/action", {"action": "start"})[0] == 200
    assert emu.wait_for(pod_id, lambda p: p["status"] == "RUNNING")["locked"] is True


def test_a_terminated_pod_leaves_no_logs_behind_but_stays_billed(memory_emulator):
    pod_id = create(memory_emulator, name="short-lived")["id"]
    memory_emulator.admin("POST", f"/_emulator/pods/{pod_id}/logs", {"lines": ["hello"]})
    log_file = memory_emulator.state_dir / "logs" / f"{pod_id}.jsonl"
    assert log_file.exists()
    assert memory_emulator.api("DELETE", f"/v2/pods/{pod_id}")[0] == 204
    deadline = time.monotonic() + 10
    while log_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not log_file.exists()
    billed = memory_emulator.admin("GET", f"/v2/billing/pods?podId={pod_id}")["metadata"]["uniquePodCount"]
    assert billed == 1
