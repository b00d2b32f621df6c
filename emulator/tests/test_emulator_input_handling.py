"""Input handling (issue 10, item 6): every answer is problem+json, numbers JSON's grammar allows but no
request should carry are refused before they reach state, query integers take ASCII digits only, patterns
and integers follow JSON Schema 2020-12 (ECMA-262 regexes, 50.0 is an integer), the memory backend takes
what the spec takes, and a client hanging up early is one log line."""

from __future__ import annotations

import json
import math
import socket
import struct
import time

import pytest
from emulator_helpers import GPU, gpu_pod_body
from runpod_emulator.testing import EmulatorProcess

SSH_KEY_BODY = "AAAAC3NzaC1lZDI1NTE5AAAAIB7v0vbBPx6cRvtmn4rEyQcW1cBW3fF+Zd9U1ySiagsM"


def raw_exchange(port: int, payload: bytes, timeout_s: float = 10) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes; (status, headers with lowercase names, body) of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as conn:
        conn.sendall(payload)
        data = b""
        while True:
            try:
                chunk = conn.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            data += chunk
            head, sep, body = data.partition(b"\r\n\r\n")
            if sep and b"content-length:" in head.lower():
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                if len(body) >= length:
                    break
    head, _sep, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict((k.lower(), v.strip()) for k, _s, v in (line.partition(":") for line in lines[1:]))
    return int(lines[0].split()[1]), headers, body


def assert_problem(status: int, headers: dict[str, str], body: bytes, want: int) -> dict:
    assert status == want, (status, body[:300])
    assert headers.get("content-type") == "application/problem+json", (headers, body[:300])
    problem = json.loads(body)
    assert problem["status"] == want and problem["title"] and problem["detail"], problem
    return problem


def request_bytes(emu: EmulatorProcess, method: str, path: str, body: bytes = b"", extra: str = "") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {emu.api_key}\r\n{extra}"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


# Unknown methods and malformed requests ----------------------------------------------------------------------


def test_unknown_methods_are_routed_405_with_allow_or_404_as_problem_json(memory_emulator):
    emu = memory_emulator
    for method, path, status, allow in (
        ("TRACE", "/v2/pods", 405, "GET, POST"),
        ("QUERY", "/v2/pods/abc", 405, "GET, PATCH, DELETE"),
        ("BREW", "/v2/account/ssh-keys", 405, "GET, PUT"),
        ("PROPFIND", "/_emulator/faults", 405, "POST, GET, DELETE"),
        ("QUERY", "/nowhere", 404, None),
    ):
        got, headers, body = raw_exchange(emu.port, request_bytes(emu, method, path))
        problem = assert_problem(got, headers, body, status)
        assert headers.get("allow") == allow, (method, path, headers)
        assert method in problem["detail"] or status == 404


@pytest.mark.parametrize(
    ("payload", "status"),
    [
        (b"GARBAGE\r\n\r\n", 400),  # bad request line
        (b"GET /v2/pods HTTP/9.9\r\n\r\n", 505),  # bad version
        (b"GET /v2/pods\r\n\r\n", 400),  # HTTP/0.9: would be answered without status line or headers
        (b"G{T /v2/pods HTTP/1.1\r\nHost: t\r\n\r\n", 400),  # a method that is not a token
        (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", 414),  # oversized request line
        (b"GET /v2/pods HTTP/1.1\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n", 431),  # oversized header
        (b"GET /v2/pods HTTP/1.1\r\n" + b"X-A: b\r\n" * 150 + b"\r\n", 431),  # too many headers
        # Headers are Latin-1: b"\xb2" is '²', which str.isdigit() takes and int() does not.
        (b"GET /v2/pods HTTP/1.1\r\nContent-Length: \xb2\r\n\r\n", 400),
        (b"GET /v2/pods HTTP/1.1\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n", 400),
    ],
    ids=["request-line", "version", "http-0.9", "method", "long-line", "long-header", "headers", "cl-sup", "cl-huge"],
)
def test_malformed_requests_get_problem_json(memory_emulator, payload, status):
    assert_problem(*raw_exchange(memory_emulator.port, payload), status)
    assert memory_emulator.api("GET", "/v2/pods")[0] == 200


# NaN, infinities and huge integers ---------------------------------------------------------------------------


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999", "-1e400"])
def test_nan_and_infinite_numbers_are_refused_and_never_reach_state(memory_emulator, number):
    emu = memory_emulator
    for path, body in (
        ("/_emulator/clock", f'{{"advance_s": {number}}}'),
        ("/v2/pods", f'{{"name": "n", "image": "i", "gpu": {{"id": "{GPU}", "count": {number}}}}}'),
        ("/v2/network-volumes", f'{{"name": "v", "size": [1, {{"x": {number}}}], "dataCenter": "EU-RO-1"}}'),
    ):
        problem = assert_problem(*raw_exchange(emu.port, request_bytes(emu, "POST", path, body.encode())), 400)
        assert "not acceptable JSON" in problem["detail"], problem
    account = json.loads((emu.state_dir / "db" / "account.json").read_text(), parse_constant=lambda c: c)
    assert isinstance(account["clockOffset"], float) and math.isfinite(account["clockOffset"])
    assert emu.api("GET", "/v2/pods")[2] == {"pods": []}
    assert emu.admin("POST", "/_emulator/clock", {"advance_s": 1})["offset_s"] >= 1


def test_a_nan_already_on_disk_is_skipped_with_a_warning(tmp_path):
    state = tmp_path / "emu"
    (state / "db" / "pods").mkdir(parents=True)
    (state / "db" / "account.json").write_text('{"clockOffset": NaN, "sshKeys": []}')
    (state / "db" / "pods" / "bad.json").write_text('{"id": "bad", "createdAt": NaN}')
    with EmulatorProcess(backend="memory", state_dir=state) as emu:
        status, _headers, body = emu.api("GET", "/v2/pods")
        assert status == 200 and body == {"pods": []}
        assert emu.admin("POST", "/_emulator/clock", {"advance_s": 60})["offset_s"] == pytest.approx(60)
        assert emu.api("POST", "/v2/pods", gpu_pod_body())[0] == 201
        log = emu.log_path.read_text()
    assert "ignoring clockOffset nan" in log and "bad.json" in log, log
    assert "Traceback" not in log


def test_huge_integers_are_a_4xx_naming_the_body_or_the_field(memory_emulator):
    emu = memory_emulator
    digits = "7" * 5000
    for path, body in (
        ("/v2/pods", f'{{"name": "n", "image": "i", "gpu": {{"id": "{GPU}"}}, "disk": {digits}}}'),
        ("/_emulator/clock", f'{{"advance_s": {digits}}}'),
    ):
        problem = assert_problem(*raw_exchange(emu.port, request_bytes(emu, "POST", path, body.encode())), 400)
        assert "request body" in problem["detail"] and "5000 digits" in problem["detail"], problem
    # Within Python's limit but beyond 64 bits: the field is named.
    status, _headers, problem = emu.api("POST", "/v2/pods", gpu_pod_body(disk=10**300))
    assert status == 422 and "$.disk: must be a 64-bit integer" in problem["errors"], problem
    status, _headers, problem = emu.api("POST", "/v2/pods", gpu_pod_body(disk=1e300))
    assert status == 422 and "$.disk: must be a 64-bit integer" in problem["errors"], problem


# Query integers and list filters -----------------------------------------------------------------------------


def test_integer_query_parameters_take_ascii_digits_only(memory_emulator):
    emu = memory_emulator
    pod_id = emu.admin("POST", "/v2/pods", gpu_pod_body())["id"]
    for path, name in (
        (f"/v2/pods/{pod_id}/logs?tail=%C2%B2", "tail"),  # '²': str.isdigit() is true, int() fails
        (f"/v2/pods/{pod_id}/logs?tail=%D9%A3", "tail"),  # Arabic-Indic 3: int() takes it
        ("/v2/billing/pods?lastN=%C2%B2", "lastN"),
        ("/v2/billing/network-volumes?lastN=%D9%A3", "lastN"),
        ("/v2/catalog/gpus?include=AVAILABILITY&product=POD&count=%D9%A3", "count"),
        ("/v2/catalog/cpus?include=AVAILABILITY&product=POD&vcpuCount=%C2%B2", "vcpuCount"),
    ):
        status, _headers, problem = emu.api("GET", path)
        assert status == 400 and problem["detail"].startswith(f"{name}: "), (path, problem)
    assert emu.api("GET", "/v2/billing/pods?lastN=3")[0] == 200
    assert emu.api("GET", "/v2/catalog/gpus?include=AVAILABILITY&product=POD&count=2")[0] == 200
    assert emu.api("GET", f"/v2/pods/{pod_id}/logs?tail=" + "9" * 5000)[0] == 422


def test_list_filters_refuse_empty_items(memory_emulator):
    for query, name in (
        ("/v2/catalog/datacenters?networkVolumeTypes=,,", "networkVolumeTypes"),
        ("/v2/catalog/datacenters?regions=EUROPE,", "regions"),
        ("/v2/catalog/gpus?include=AVAILABILITY&product=POD,,CLUSTER", "product"),
        ("/v2/catalog/datacenters/EU-RO-1?include=,GPU_AVAILABILITY", "include"),
    ):
        status, _headers, problem = memory_emulator.api("GET", query)
        assert status == 400 and problem["detail"].startswith(f"{name}: ") and "empty item" in problem["detail"]
    # An empty value is one empty item too (form style, explode=false: [""] is sent as `name=`).
    status, _headers, problem = memory_emulator.api("GET", "/v2/catalog/datacenters?networkVolumeTypes=")
    assert status == 400 and "networkVolumeTypes: '' has an empty item" in problem["detail"], problem
    assert memory_emulator.api("GET", "/v2/catalog/datacenters?networkVolumeTypes=STANDARD")[0] == 200


# JSON Schema 2020-12: integers and patterns -----------------------------------------------------------------


def test_integral_numbers_written_as_floats_are_integers(memory_emulator):
    emu = memory_emulator
    status, _headers, pod = emu.api("POST", "/v2/pods", gpu_pod_body(disk=50.0, gpu={"id": GPU, "count": 1.0}))
    assert status == 201 and pod["disk"] == 50 and pod["gpu"]["count"] == 1, pod
    raw = emu.api("GET", f"/v2/pods/{pod['id']}")
    assert raw[2]["disk"] == 50 and isinstance(raw[2]["disk"], int)
    status, _headers, volume = emu.api(
        "POST", "/v2/network-volumes", {"name": "v", "size": 5e1, "dataCenter": "EU-RO-1"}
    )
    assert status == 201 and volume["size"] == 50 and isinstance(volume["size"], int), volume
    status, _headers, problem = emu.api("POST", "/v2/pods", gpu_pod_body(disk=50.5))
    assert status == 422 and "$.disk: expected integer, got number" in problem["errors"], problem


def test_ssh_key_pattern_has_ecma_262_meaning(memory_emulator):
    emu = memory_emulator
    # \x1c..\x1f are \s for Python, not for ECMA-262: `[^\s]+` takes them.
    for char in ("\x1c", "\x1f", "\x85"):
        key = f"ssh-ed25519 {SSH_KEY_BODY[:10]}{char}{SSH_KEY_BODY[10:]} test"
        status, _headers, body = emu.api("PUT", "/v2/account/ssh-keys", {"keys": [key]})
        assert status == 200 and body == {"keys": [key]}, (repr(char), body)
    # U+FEFF and U+2028 are \s for ECMA-262, not for Python: `[^\s]+` refuses them.
    for char in ("\ufeff", "\u2028", "\u205f"):
        key = f"ssh-ed{char}25519 {SSH_KEY_BODY} test"
        status, _headers, problem = emu.api("PUT", "/v2/account/ssh-keys", {"keys": [key]})
        assert status == 422 and "$.keys[0]: does not match pattern" in problem["detail"], (repr(char), problem)
    # \d is [0-9] only: an Arabic-Indic CUDA version is not major.minor.
    status, _headers, problem = emu.api("POST", "/v2/pods", gpu_pod_body(gpu={"id": GPU, "minCudaVersion": "١٢.٤"}))
    assert status == 422 and "$.gpu.minCudaVersion" in problem["detail"], problem


# The memory backend follows the spec (the podman backend's own limits: test_emulator_podman_lifecycle.py) ----


def test_memory_backend_takes_env_names_mount_paths_and_volume_ids_the_spec_allows(memory_emulator):
    emu = memory_emulator
    env = {"A=B": "1", "1X": "a\u0000b", "": "empty name"}
    status, _headers, pod = emu.api("POST", "/v2/pods", gpu_pod_body(env=env))
    assert status == 201 and pod["env"] == env, pod
    mounts = {"persistent": {"size": 10, "path": "relative:with,colon"}}
    status, _headers, pod = emu.api("POST", "/v2/pods", gpu_pod_body(mounts=mounts))
    assert status == 201 and pod["mounts"] == mounts, pod
    status, _headers, patched = emu.api("PATCH", f"/v2/pods/{pod['id']}", {"env": {"9": "x"}})
    assert status == 200 and patched["env"] == {"9": "x"}
    # An empty volumeId is a string like any other: no such volume (404), not a schema violation.
    status, _headers, problem = emu.api(
        "POST", "/v2/pods", gpu_pod_body(mounts={"network": [{"volumeId": "", "path": "/v"}]})
    )
    assert status == 404 and "network volume" in problem["detail"], problem


# Billing -----------------------------------------------------------------------------------------------------


def test_billing_window_beyond_the_bucket_cap_is_refused(memory_emulator):
    emu = memory_emulator
    emu.admin("POST", "/v2/pods", gpu_pod_body())
    query = "bucketSize=hour&startTime=2024-01-01T00:00:00Z&endTime=2026-01-01T00:00:00Z"
    for path in ("/v2/billing/pods", "/v2/billing/network-volumes"):
        status, _headers, problem = emu.api("GET", f"{path}?{query}")
        assert status == 400 and "10000 hour buckets" in problem["detail"], problem
    # Exactly at the cap: every bucket is there.
    status, _headers, body = emu.api(
        "GET", "/v2/billing/pods?bucketSize=hour&startTime=2024-01-01T00:00:00Z&endTime=2025-02-20T16:00:00Z"
    )
    assert status == 200 and body["metadata"]["query"]["endTime"].startswith("2025-02-20T16:00:00"), body["metadata"]


# A client hanging up early -----------------------------------------------------------------------------------


def test_a_client_hanging_up_early_is_one_log_line(tmp_path):
    with EmulatorProcess(backend="memory", state_dir=tmp_path / "emu", extra_args=["--log-level", "INFO"]) as emu:
        for partial in (b"", b"GET /v2/pods HTTP/1.1\r\nHost: t\r\n"):
            conn = socket.create_connection(("127.0.0.1", emu.port), timeout=10)
            conn.sendall(partial)
            time.sleep(0.2)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()  # a reset, not a clean close
        deadline = time.monotonic() + 10
        while emu.log_path.read_text().count("ended early") < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert emu.api("GET", "/v2/pods")[0] == 200
        log = emu.log_path.read_text()
    early = [line for line in log.splitlines() if "ended early" in line]
    assert len(early) == 2 and all("ConnectionResetError" in line for line in early), log
    assert "Traceback" not in log and "Exception occurred" not in log, log


def test_since_is_validated_even_with_last_event_id(memory_emulator):
    """Found by the Schemathesis run: a bad `since` passed whenever Last-Event-ID was sent."""
    emu = memory_emulator
    pod_id = emu.admin("POST", "/v2/pods", gpu_pod_body())["id"]
    headers = {"Last-Event-ID": "2000-01-01T00:00:00Z"}
    for since in ("", "yesterday"):
        status, _headers, problem = emu.api("GET", f"/v2/pods/{pod_id}/logs?since={since}", headers=headers)
        assert status == 422 and problem["detail"].endswith(f"since: {since!r} is not an RFC 3339 date-time")
