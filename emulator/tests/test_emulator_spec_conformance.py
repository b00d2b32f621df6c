"""Spec conformance: every implemented operation, happy paths and errors, validated against RunPod's
official OpenAPI document (openapi-core): status, headers and body of every response, and every
happy-path request too. Requests that the spec forbids must be refused.

The spec is read from <repo root>/../shared/runpod/openapi-v2.json (CI has ../shared beside the
clone), else /work/shared/runpod/openapi-v2.json.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from emulator_helpers import GPU, IMPLEMENTED
from runpod_emulator.testing import EmulatorProcess

openapi_core = pytest.importorskip("openapi_core")
from openapi_core import Config, OpenAPI  # noqa: E402
from openapi_core.testing import MockRequest, MockResponse  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
SPEC_CANDIDATES = [
    REPO_ROOT.parent / "shared" / "runpod" / "openapi-v2.json",
    Path("/work/shared/runpod/openapi-v2.json"),
]
SERVER = "https://api.runpod.io"
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB7v0vbBPx6cRvtmn4rEyQcW1cBW3fF+Zd9U1ySiagsM spec@test"


def spec_path() -> Path:
    for candidate in SPEC_CANDIDATES:
        if candidate.is_file():
            return candidate
    pytest.skip(f"RunPod spec not found at {', '.join(map(str, SPEC_CANDIDATES))}")
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def openapi() -> OpenAPI:
    deserializers = {
        "application/problem+json": json.loads,
        "text/event-stream": lambda raw: raw.decode() if isinstance(raw, bytes) else raw,
    }
    return OpenAPI.from_file_path(str(spec_path()), config=Config(extra_media_type_deserializers=deserializers))


def template_of(path: str) -> tuple[str, ...]:
    parts = path.split("/")
    for method, template in IMPLEMENTED:
        pieces = template.split("/")
        if len(pieces) == len(parts) and all(p == q or p.startswith("{") for p, q in zip(pieces, parts, strict=True)):
            return method, template
    return "", path


class SpecClient:
    """Sends requests to the emulator and validates each exchange against the spec."""

    def __init__(self, emulator: EmulatorProcess, openapi: OpenAPI) -> None:
        self.emulator = emulator
        self.openapi = openapi
        self.seen: set[tuple[str, str, int]] = set()

    def mock_request(self, method: str, target: str, raw: bytes | None, headers: dict[str, str]) -> MockRequest:
        split = urlsplit(target)
        return MockRequest(
            SERVER,
            method.lower(),
            split.path,
            args=dict(parse_qsl(split.query, keep_blank_values=True)),
            headers=headers,
            data=raw,
        )

    def call(
        self,
        method: str,
        target: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        auth: bool = True,
        request_valid: bool | None = True,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], Any]:
        """One exchange. request_valid: True = the spec accepts the request, False = it must reject it,
        None = the spec cannot tell (a rule enforced by the handler, such as gpu+cpu)."""
        send_headers = {"Content-Type": "application/json", **(headers or {})}
        if auth:
            send_headers["Authorization"] = f"Bearer {self.emulator.api_key}"
        if raw is None and body is not None:
            raw = json.dumps(body).encode()
        request = self.mock_request(method, target, raw, send_headers)
        if request_valid is True:
            self.openapi.validate_request(request)
        elif request_valid is False:
            with pytest.raises(Exception):  # noqa: B017 - any validation error of openapi-core
                self.openapi.validate_request(request)
        connection = http.client.HTTPConnection("127.0.0.1", self.emulator.port, timeout=30)
        connection.request(method, target, body=raw, headers=send_headers)
        response = connection.getresponse()
        payload = response.read()
        response_headers = dict(response.getheaders())
        connection.close()
        self.check(request, response.status, response_headers, payload, authenticated=auth)
        return response.status, response_headers, json.loads(payload) if payload else None

    def check(self, request: MockRequest, status: int, headers: dict[str, str], payload: bytes, authenticated: bool):
        content_type = headers.get("Content-Type", "application/json")
        self.openapi.validate_response(
            request, MockResponse(payload, status, headers=headers, content_type=content_type)
        )
        if authenticated:
            assert "RateLimit" in headers and "RateLimit-Policy" in headers
        if status == 429:
            assert headers["Retry-After"].isdigit()
        if status >= 400:
            assert content_type == "application/problem+json"
            assert json.loads(payload)["status"] == status
        _method, template = template_of(request.path)
        self.seen.add((request.method.upper(), template, status))

    def logs(self, target: str, want_events: int, extra_headers: dict[str, str] | None = None) -> list[dict]:
        """Read `want_events` SSE events, then validate the exchange (status, headers, body) and close."""
        headers = {"Authorization": f"Bearer {self.emulator.api_key}", **(extra_headers or {})}
        lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        with socket.create_connection(("127.0.0.1", self.emulator.port), timeout=10) as conn:
            conn.sendall(f"GET {target} HTTP/1.1\r\nHost: emulator\r\n{lines}\r\n".encode())
            data = b""
            deadline = time.monotonic() + 10
            while data.count(b"\n\n") < want_events and time.monotonic() < deadline:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
        head, _sep, body = data.partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode().split("\r\n")
        response_headers = dict(line.split(": ", 1) for line in header_lines)
        status = int(status_line.split()[1])
        complete = body[: body.rfind(b"\n\n") + 2] if b"\n\n" in body else body
        self.check(self.mock_request("GET", target, None, headers), status, response_headers, complete, True)
        assert response_headers["Cache-Control"] == "no-cache" and response_headers["X-Accel-Buffering"] == "no"
        events = []
        for block in complete.decode().split("\n\n"):
            fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
            if "data" in fields:
                event = json.loads(fields["data"])
                assert fields["id"] == event["ts"] and set(event) == {"source", "line", "ts"}
                events.append(event)
        return events


@pytest.fixture(scope="module")
def client(tmp_path_factory, openapi) -> SpecClient:
    state = tmp_path_factory.mktemp("spec-emu")
    with EmulatorProcess(backend="memory", state_dir=state, extra_args=["--provision-seconds", "0.05"]) as emulator:
        yield SpecClient(emulator, openapi)


def wait_running(client: SpecClient, pod_id: str) -> dict:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        _status, _h, pod = client.call("GET", f"/v2/pods/{pod_id}")
        if pod["status"] == "RUNNING" and pod["ssh"]["direct"] is not None:
            return pod
        time.sleep(0.05)
    raise AssertionError(f"pod {pod_id} never ran")


def test_every_operation_conforms(client: SpecClient):
    c = client
    # Auth and unknown ids.
    assert c.call("GET", "/v2/pods", auth=False, request_valid=False)[0] == 401
    assert c.call("GET", "/v2/pods/nope")[0] == 404
    # SSH keys.
    assert c.call("GET", "/v2/account/ssh-keys")[2] == {"keys": []}
    assert c.call("PUT", "/v2/account/ssh-keys", {"keys": [SSH_KEY]})[0] == 200
    # Catalog.
    assert c.call("GET", "/v2/catalog/gpus")[0] == 200
    gpus = c.call("GET", "/v2/catalog/gpus?include=AVAILABILITY&product=POD&count=2&cloud=SECURE")[2]["gpus"]
    assert all("availability" in gpu for gpu in gpus)
    assert (
        c.call("GET", "/v2/catalog/gpus?include=AVAILABILITY&product=POD&countryCodes=RO&minCudaVersion=12")[0] == 200
    )
    assert c.call("GET", f"/v2/catalog/gpus/{GPU}".replace(" ", "%20"))[0] == 200
    assert c.call("GET", "/v2/catalog/gpus/NVIDIA%20Z9000")[0] == 404
    assert c.call("GET", "/v2/catalog/gpus?include=AVAILABILITY", request_valid=None)[0] == 400
    assert c.call("GET", "/v2/catalog/cpus")[0] == 200
    assert c.call("GET", "/v2/catalog/cpus?include=AVAILABILITY&product=POD&vcpuCount=4")[0] == 200
    assert c.call("GET", "/v2/catalog/cpus/cpu3c")[0] == 200
    assert c.call("GET", "/v2/catalog/cpus/nope")[0] == 404
    centers = c.call("GET", "/v2/catalog/datacenters?include=GPU_AVAILABILITY,CPU_AVAILABILITY&regions=EUROPE")[2]
    assert {dc["id"] for dc in centers["dataCenters"]} == {"EU-RO-1", "EU-SE-1"}
    assert c.call("GET", "/v2/catalog/datacenters/EU-RO-1?include=GPU_AVAILABILITY")[0] == 200
    assert c.call("GET", "/v2/catalog/datacenters/MARS-1")[0] == 404
    assert c.call("GET", "/v2/catalog/datacenters?regions=ATLANTIS", request_valid=False)[0] == 422
    # Network volumes.
    status, _h, volume = c.call("POST", "/v2/network-volumes", {"name": "vol", "size": 10, "dataCenter": "EU-RO-1"})
    assert status == 201
    vid = volume["id"]
    assert c.call("GET", "/v2/network-volumes")[0] == 200
    assert c.call("GET", f"/v2/network-volumes/{vid}")[0] == 200
    assert c.call("PATCH", f"/v2/network-volumes/{vid}", {"size": 20})[0] == 200
    assert c.call("PATCH", f"/v2/network-volumes/{vid}", {"size": 10}, request_valid=None)[0] == 400
    assert c.call("GET", "/v2/network-volumes/nope")[0] == 404
    assert c.call("PATCH", "/v2/network-volumes/nope", {"name": "x"})[0] == 404
    assert c.call("DELETE", "/v2/network-volumes/nope")[0] == 404
    # Pods: GPU with persistent mount, CPU with the network volume.
    gpu_body = {
        "name": "spec-gpu",
        "image": "runpod/pytorch:2.8.0",
        "gpu": {"id": GPU, "count": 1, "allowedCudaVersions": ["12.8"]},
        "ports": ["22/tcp", "8888/http"],
        "env": {"A": "1"},
        "startSsh": True,
        "disk": 30,
        "dataCenterIds": ["EU-RO-1"],
        "mounts": {"persistent": {"size": 20, "path": "/workspace"}},
    }
    status, _h, gpu_pod = c.call("POST", "/v2/pods", gpu_body)
    assert status == 201 and gpu_pod["status"] == "PROVISIONING"
    cpu_body = {
        "name": "spec-cpu",
        "image": "ubuntu",
        "cpu": {"id": "cpu3c", "vcpuCount": 2},
        "ports": ["22/tcp"],
        "startSsh": True,
        "mounts": {"network": [{"volumeId": vid, "path": "/runpod-volume"}]},
    }
    status, _h, cpu_pod = c.call("POST", "/v2/pods", cpu_body)
    assert status == 201 and cpu_pod["cpu"]["memory"] == 4 and "gpu" not in cpu_pod
    assert c.call("DELETE", f"/v2/network-volumes/{vid}")[0] == 409  # attached
    assert c.call("GET", "/v2/pods")[0] == 200
    assert c.call("GET", "/v2/pods?includeClusterPods=true")[0] == 200
    running = wait_running(c, gpu_pod["id"])
    assert running["runtime"]["ports"][0]["public"] == running["ssh"]["direct"]["port"]
    wait_running(c, cpu_pod["id"])
    status, _h, patched = c.call("PATCH", f"/v2/pods/{gpu_pod['id']}", {"name": "renamed", "env": {"B": "2"}})
    assert status == 200 and patched["env"] == {"B": "2"}
    patch = {"mounts": {"persistent": {"size": 30, "path": "/data"}}}
    assert c.call("PATCH", f"/v2/pods/{gpu_pod['id']}", patch)[2]["mounts"]["persistent"]["path"] == "/data"
    wrong_kind = {"mounts": {"network": [{"volumeId": vid, "path": "/v"}]}}
    assert c.call("PATCH", f"/v2/pods/{gpu_pod['id']}", wrong_kind, request_valid=None)[0] == 400
    assert c.call("PATCH", f"/v2/pods/{cpu_pod['id']}", {"mounts": {"network": []}}, request_valid=None)[0] == 400
    assert c.call("PATCH", "/v2/pods/nope", {"name": "x"})[0] == 404
    # Actions, in the order the status allows them.
    act = f"/v2/pods/{gpu_pod['id']}/action"
    assert c.call("POST", act, {"action": "start"})[0] == 409
    assert c.call("POST", act, {"action": "restart"})[0] == 200
    wait_running(c, gpu_pod["id"])
    assert c.call("POST", act, {"action": "stop"})[2]["status"] == "EXITED"
    assert c.call("POST", act, {"action": "stop"})[0] == 409
    assert c.call("POST", act, {"action": "start"})[0] == 200
    assert c.call("POST", "/v2/pods/nope/action", {"action": "stop"})[0] == 404
    # Logs (SSE).
    events = c.logs(f"/v2/pods/{gpu_pod['id']}/logs?source=system&tail=3", 3)
    assert len(events) >= 3 and all(e["source"] == "system" for e in events)
    resumed = c.logs(f"/v2/pods/{gpu_pod['id']}/logs?source=system", 1, {"Last-Event-ID": events[0]["ts"]})
    assert resumed[0]["ts"] == events[1]["ts"]
    assert c.logs(f"/v2/pods/{gpu_pod['id']}/logs?since={events[1]['ts']}&source=system", 1)[0] == events[1]
    assert c.call("GET", "/v2/pods/nope/logs")[0] == 404
    # Billing.
    assert c.call("GET", "/v2/billing/pods")[2]["metadata"]["uniquePodCount"] == 2
    assert c.call("GET", f"/v2/billing/pods?podId={gpu_pod['id']}&bucketSize=hour&lastN=3")[0] == 200
    assert c.call("GET", "/v2/billing/pods?startTime=2026-01-01T00:00:00Z&endTime=2026-02-01T00:00:00Z")[0] == 200
    assert c.call("GET", "/v2/billing/network-volumes?bucketSize=month&lastN=2")[0] == 200
    assert c.call("GET", f"/v2/billing/network-volumes?networkVolumeId={vid}")[0] == 200
    assert c.call("GET", "/v2/billing/network-volumes?lastN=0", request_valid=False)[0] == 422
    assert c.call("GET", "/v2/billing/pods?lastN=2&startTime=2026-01-01T00:00:00Z", request_valid=None)[0] == 400
    assert c.call("GET", "/v2/billing/pods?bucketSize=fortnight", request_valid=False)[0] == 422
    # Faults answer in the spec's shapes too.
    for kind, expected in (("429", 429), ("500", 500), ("503", 503)):
        c.emulator.admin("POST", "/_emulator/faults", {"kind": kind, "count": 1})
        assert c.call("GET", "/v2/pods")[0] == expected
    c.emulator.admin("POST", "/_emulator/faults", {"kind": "500_after_create", "count": 1})
    assert c.call("POST", "/v2/pods", {**cpu_body, "name": "half-made", "mounts": {}})[0] == 500
    # Terminate and delete.
    assert c.call("POST", f"/v2/pods/{cpu_pod['id']}/action", {"action": "terminate"})[0] == 204
    assert c.call("DELETE", f"/v2/pods/{gpu_pod['id']}")[0] == 204
    assert c.call("DELETE", f"/v2/pods/{gpu_pod['id']}")[0] == 404
    assert c.call("DELETE", f"/v2/network-volumes/{vid}")[0] == 204
    # Every implemented operation was exercised with a success and an error.
    for method, template in IMPLEMENTED:
        statuses = {status for m, t, status in c.seen if (m, t) == (method, template)}
        assert any(s < 300 for s in statuses), f"{method} {template}: no success exercised"
        if template not in ("/v2/pods", "/v2/network-volumes", "/v2/account/ssh-keys", "/v2/catalog/cpus"):
            assert any(s >= 400 for s in statuses), f"{method} {template}: no error exercised"


FORBIDDEN = [
    # (method, path, body, status): each body violates the spec's schema.
    ("POST", "/v2/pods", {"name": "x", "image": "i", "gpu": {"id": GPU}, "bogus": True}, 422),
    ("POST", "/v2/pods", {"name": "x", "image": "i", "gpu": {"id": GPU, "count": 0}}, 422),
    ("POST", "/v2/pods", {"name": "x", "image": "i", "gpu": {"id": GPU, "extra": 1}}, 422),
    ("POST", "/v2/pods", {"name": "x", "image": "i", "gpu": {"id": GPU, "minCudaVersion": "12"}}, 422),
    ("POST", "/v2/pods", {"name": "x", "image": "i", "cpu": {"id": "cpu3c", "vcpuCount": 1}}, 422),
    ("POST", "/v2/pods", {"name": "x", "image": "i", "cpu": {"id": "cpu3c"}}, 422),
    ("POST", "/v2/pods", {"name": "x", "image": "i", "gpu": {"id": GPU}, "cloud": "PRIVATE"}, 422),
    ("POST", "/v2/pods", {"name": "x", "image": "i", "gpu": {"id": GPU}, "disk": 0}, 422),
    ("POST", "/v2/pods", {"name": "x", "image": "i", "gpu": {"id": GPU}, "startSsh": "yes"}, 422),
    ("POST", "/v2/pods", {"name": "x", "gpu": {"id": GPU}}, 422),
    ("POST", "/v2/pods", {"image": "i", "gpu": {"id": GPU}}, 422),
    (
        "POST",
        "/v2/pods",
        {"name": "x", "image": "i", "gpu": {"id": GPU}, "mounts": {"persistent": {"size": 5, "path": "/w"}}},
        422,
    ),
    ("POST", "/v2/pods", {"name": "x", "image": "i", "gpu": {"id": GPU}, "mounts": {"persistent": {"size": 10}}}, 422),
    (
        "POST",
        "/v2/pods",
        {"name": "x", "image": "i", "gpu": {"id": GPU}, "mounts": {"network": [{"volumeId": "a", "path": "/a"}] * 2}},
        422,
    ),
    ("POST", "/v2/pods", {"name": "x", "image": "i", "gpu": {"id": GPU}, "mounts": {"scratch": {}}}, 422),
    ("PATCH", "/v2/pods/{pod}", {"dataCenterIds": ["EU-RO-1"]}, 422),
    ("PATCH", "/v2/pods/{pod}", {"gpu": {"id": GPU}}, 422),
    ("POST", "/v2/pods/{pod}/action", {"action": "pause"}, 422),
    ("POST", "/v2/pods/{pod}/action", {"action": "stop", "force": True}, 422),
    ("POST", "/v2/pods/{pod}/action", {}, 422),
    ("PUT", "/v2/account/ssh-keys", {"keys": ["not-a-key"]}, 422),
    ("PUT", "/v2/account/ssh-keys", {"keys": [SSH_KEY], "merge": True}, 422),
    ("POST", "/v2/network-volumes", {"name": "v", "size": 9, "dataCenter": "EU-RO-1"}, 422),
    ("POST", "/v2/network-volumes", {"name": "v", "size": 4097, "dataCenter": "EU-RO-1"}, 422),
    ("POST", "/v2/network-volumes", {"name": "v", "size": 10, "dataCenter": "EU-RO-1", "type": "FAST"}, 422),
    ("POST", "/v2/network-volumes", {"name": "v", "size": 10}, 422),
    ("PATCH", "/v2/network-volumes/{volume}", {"dataCenter": "US-TX-3"}, 422),
    ("PATCH", "/v2/network-volumes/{volume}", {"type": "HIGH_PERFORMANCE"}, 422),
    ("PATCH", "/v2/network-volumes/{volume}", {}, 422),
]

CONTRADICTIONS = [
    # Valid for the schema, refused by the handler as the spec describes (400).
    ("POST", "/v2/pods", {"name": "x", "image": "i", "gpu": {"id": GPU}, "cpu": {"id": "cpu3c", "vcpuCount": 2}}),
    ("POST", "/v2/pods", {"name": "x", "image": "i"}),
    (
        "POST",
        "/v2/pods",
        {
            "name": "x",
            "image": "i",
            "gpu": {"id": GPU},
            "mounts": {"persistent": {"size": 10, "path": "/w"}, "network": [{"volumeId": "{volume}", "path": "/n"}]},
        },
    ),
    (
        "POST",
        "/v2/pods",
        {
            "name": "x",
            "image": "i",
            "cpu": {"id": "cpu3c", "vcpuCount": 2},
            "mounts": {"persistent": {"size": 10, "path": "/w"}},
        },
    ),
    (
        "POST",
        "/v2/pods",
        {"name": "x", "image": "i", "gpu": {"id": GPU, "allowedCudaVersions": ["12.8"], "minCudaVersion": "12.4"}},
    ),
    ("POST", "/v2/pods", {"name": "x", "image": "i", "cpu": {"id": "cpu3c", "vcpuCount": 8 - 2}}),
    ("PATCH", "/v2/network-volumes/{volume}", {"size": 10}),
]


@pytest.fixture(scope="module")
def targets(client: SpecClient) -> dict[str, str]:
    volume = client.emulator.admin("POST", "/v2/network-volumes", {"name": "t", "size": 20, "dataCenter": "EU-RO-1"})
    pod = client.emulator.admin("POST", "/v2/pods", {"name": "t", "image": "i", "cpu": {"id": "cpu3c", "vcpuCount": 2}})
    return {"volume": volume["id"], "pod": pod["id"]}


def _fill(value: Any, targets: dict[str, str]) -> Any:
    return json.loads(json.dumps(value).replace("{volume}", targets["volume"]).replace("{pod}", targets["pod"]))


@pytest.mark.parametrize(("method", "path", "body", "status"), FORBIDDEN)
def test_requests_the_spec_forbids_are_refused(client, targets, method, path, body, status):
    before = {p["id"] for p in client.emulator.admin("GET", "/v2/pods")["pods"]}
    got, _h, problem = client.call(method, _fill(path, targets), _fill(body, targets), request_valid=False)
    assert got == status, problem
    assert problem["errors"], "a 422 lists each violation"
    assert {p["id"] for p in client.emulator.admin("GET", "/v2/pods")["pods"]} == before


@pytest.mark.parametrize(("method", "path", "body"), CONTRADICTIONS)
def test_contradictions_are_400(client, targets, method, path, body):
    before = {p["id"] for p in client.emulator.admin("GET", "/v2/pods")["pods"]}
    got, _h, problem = client.call(method, _fill(path, targets), _fill(body, targets), request_valid=None)
    assert got == 400, problem
    assert {p["id"] for p in client.emulator.admin("GET", "/v2/pods")["pods"]} == before


def test_a_community_pod_on_a_host_without_a_public_ip_conforms(client: SpecClient):
    # EU-SE-1's COMMUNITY hosts have no public IP (catalog.DataCenter.community_public_ip): the running pod maps
    # 22/tcp to no public port and never gets ssh.direct; a SECURE pod there does.
    body = {"name": "spec-community", "image": "i", "gpu": {"id": "NVIDIA GeForce RTX 4090"}, "cloud": "COMMUNITY",
            "dataCenterIds": ["EU-SE-1"], "ports": ["22/tcp"], "startSsh": True}  # fmt: skip
    client.call("PUT", "/v2/account/ssh-keys", {"keys": [SSH_KEY]})
    status, _h, community = client.call("POST", "/v2/pods", body)
    assert status == 201 and community["dataCenterId"] == "EU-SE-1"
    secure = client.call("POST", "/v2/pods", {**body, "name": "spec-secure", "cloud": "SECURE"})[2]
    assert wait_running(client, secure["id"])["runtime"]["ports"][0]["ip"] == "127.0.0.1"
    deadline = time.monotonic() + 20
    pod = community
    while pod["status"] != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.05)
        pod = client.call("GET", f"/v2/pods/{community['id']}")[2]
    time.sleep(0.5)  # well past the emulator's SSH probe of a pod that has a public port
    pod = client.call("GET", f"/v2/pods/{community['id']}")[2]
    assert pod["status"] == "RUNNING" and pod["cloud"] == "COMMUNITY"
    assert pod["ssh"] == {"proxy": None, "direct": None}
    assert pod["runtime"]["ports"] == [{"private": 22, "public": None, "type": "tcp", "ip": None}]
    for pod_id in (community["id"], secure["id"]):
        assert client.call("DELETE", f"/v2/pods/{pod_id}")[0] == 204
