"""Billing ledger, rate limit headers and SSE pod logs (memory backend: none of them needs a container)."""

from __future__ import annotations

import socket
import time

import pytest
from emulator_helpers import GPU, gpu_pod_body, read_events
from runpod_emulator.ratelimit import RateLimiter
from runpod_emulator.testing import EmulatorProcess

HOURS_PER_MONTH = 730.0


def test_ledger_bills_compute_only_while_running_and_volume_disk_double_when_stopped(memory_emulator):
    emu = memory_emulator
    body = gpu_pod_body(name="billed", disk=20, mounts={"persistent": {"size": 100, "path": "/workspace"}})
    pod = emu.admin("POST", "/v2/pods", body)
    volume = emu.admin("POST", "/v2/network-volumes", {"name": "v", "size": 100, "dataCenter": "EU-RO-1"})
    running = emu.wait_for(pod["id"], lambda p: p["status"] == "RUNNING")
    running_disk_rate = (20 * 0.10 + 100 * 0.10) / HOURS_PER_MONTH
    assert running["cost"] == pytest.approx(2.99 + running_disk_rate, abs=1e-6)
    emu.admin("POST", "/_emulator/clock", {"advance_s": 3600})
    stopped = emu.admin("POST", f"/v2/pods/{pod['id']}/action", {"action": "stop"})
    assert stopped["cost"] == 0.0
    emu.admin("POST", "/_emulator/clock", {"advance_s": 3600})
    totals = emu.admin("GET", f"/v2/billing/pods?podId={pod['id']}&bucketSize=hour&lastN=4")["metadata"]["totals"]
    assert totals["gpuAmount"] == pytest.approx(2.99, rel=0.01)  # one hour of compute, not two
    assert totals["cpuAmount"] == 0.0
    stopped_disk_rate = 100 * 0.20 / HOURS_PER_MONTH  # twice the running rate of the volume disk
    assert totals["diskAmount"] == pytest.approx(running_disk_rate + stopped_disk_rate, rel=0.01)
    assert totals["totalAmount"] == pytest.approx(totals["gpuAmount"] + totals["diskAmount"], abs=1e-6)
    # Two days: the two hours advanced may cross midnight UTC and split the volume's cost over two buckets.
    volumes = emu.admin("GET", "/v2/billing/network-volumes?bucketSize=day&lastN=2")
    assert volumes["metadata"]["uniqueNetworkVolumeCount"] == 1
    assert {r["networkVolumeId"] for r in volumes["records"]} == {volume["id"]}
    volume_totals = volumes["metadata"]["totals"]
    assert volume_totals["highPerformanceAmount"] == 0.0
    assert volume_totals["standardAmount"] == pytest.approx(2 * 100 * 0.07 / HOURS_PER_MONTH, rel=0.01)


def test_volume_tiers_bill_at_their_rates_and_a_resize_changes_the_rate(memory_emulator):
    emu = memory_emulator
    fast = emu.admin(
        "POST", "/v2/network-volumes", {"name": "f", "size": 50, "dataCenter": "EU-RO-1", "type": "HIGH_PERFORMANCE"}
    )
    emu.admin("POST", "/_emulator/clock", {"advance_s": 3600})
    emu.admin("PATCH", f"/v2/network-volumes/{fast['id']}", {"size": 150})
    emu.admin("POST", "/_emulator/clock", {"advance_s": 3600})
    emu.admin("DELETE", f"/v2/network-volumes/{fast['id']}")
    emu.admin("POST", "/_emulator/clock", {"advance_s": 3600})  # deleted: accrues nothing more
    totals = emu.admin("GET", "/v2/billing/network-volumes?bucketSize=day&lastN=2")["metadata"]["totals"]
    assert totals["standardAmount"] == 0.0
    assert totals["highPerformanceAmount"] == pytest.approx((50 + 150) * 0.14 / HOURS_PER_MONTH, rel=0.01)


def test_billing_query_errors(memory_emulator):
    assert memory_emulator.api("GET", "/v2/billing/pods?lastN=2&startTime=2026-01-01T00:00:00Z")[0] == 400
    assert memory_emulator.api("GET", "/v2/billing/pods?bucketSize=fortnight")[0] == 422
    assert memory_emulator.api("GET", "/v2/billing/pods?startTime=yesterday")[0] == 422
    assert memory_emulator.api("GET", "/v2/billing/pods?lastN=0")[0] == 422
    # Dates datetime cannot step a bucket past are refused, not a 500.
    for query in ("startTime=0001-01-01T00:00:00%2B14:00", "endTime=9999-12-31T23:59:59Z&bucketSize=year"):
        status, _headers, problem = memory_emulator.api("GET", f"/v2/billing/pods?{query}")
        assert status == 422 and "outside 1970-01-01" in problem["detail"], problem
    # A huge lastN reaches back to 1970 at most.
    status, _headers, body = memory_emulator.api("GET", "/v2/billing/pods?bucketSize=year&lastN=99999999999")
    assert status == 200 and body["metadata"]["query"]["startTime"].startswith("1970-01-01T00:00:00")


def test_rate_limit_headers_and_429(tmp_path):
    with EmulatorProcess(backend="memory", state_dir=tmp_path / "emu", extra_args=["--rate-limit", "minute=5"]) as emu:
        remaining = []
        for _attempt in range(12):
            status, headers, body = emu.api("GET", "/v2/pods")
            assert headers["RateLimit-Policy"].startswith('"minute";q=5;w=60')
            if status == 429:
                break
            remaining.append(int(headers["RateLimit"].split(";")[1].removeprefix("r=")))
        assert status == 429, "the quota was never enforced"
        assert body["status"] == 429 and "rate limit" in body["detail"]
        assert 1 <= int(headers["Retry-After"]) <= 60
        assert '"minute";r=0;' in headers["RateLimit"]
        assert remaining[-1] == 0 and remaining == sorted(remaining, reverse=True)
        # The admin API is not rate limited.
        assert emu.admin("GET", "/_emulator/info")["backend"] == "memory"


def test_retry_after_is_never_before_the_window_resets():
    limiter = RateLimiter({"minute": 1, "hour": 100})
    assert limiter.check("key", now=60.3).allowed
    refused = limiter.check("key", now=60.3)
    assert not refused.allowed and refused.retry_after_s == 60  # 59.7 s left: rounded up, not down
    assert '"minute";r=0;t=60' in refused.headers["RateLimit"]
    assert not limiter.check("key", now=60.3 + refused.retry_after_s - 1).allowed
    assert limiter.check("key", now=60.3 + refused.retry_after_s).allowed


def test_sse_logs_tail_since_last_event_id_and_follow(memory_emulator):
    emu = memory_emulator
    pod = emu.admin("POST", "/v2/pods", gpu_pod_body(name="logger", gpu={"id": GPU}))
    emu.admin("POST", f"/_emulator/pods/{pod['id']}/logs", {"lines": [f"line {i}" for i in range(10)]})
    base = f"/v2/pods/{pod['id']}/logs"
    status, events = read_events(emu.port, emu.api_key, f"{base}?source=container&tail=3", 3)
    assert status.endswith("200 OK")
    assert [e["line"] for _id, e in events] == ["line 7", "line 8", "line 9"]
    assert all(event_id == e["ts"] and e["source"] == "container" for event_id, e in events)
    _status, events = read_events(emu.port, emu.api_key, f"{base}?source=container&tail=10", 10)
    cursor = events[4][0]
    _status, resumed = read_events(emu.port, emu.api_key, f"{base}?source=container", 5, f"Last-Event-ID: {cursor}\r\n")
    assert [e["line"] for _id, e in resumed] == [f"line {i}" for i in range(5, 10)]
    _status, since = read_events(emu.port, emu.api_key, f"{base}?source=container&since={cursor}", 6)
    assert [e["line"] for _id, e in since] == [f"line {i}" for i in range(4, 10)]
    _status, system = read_events(emu.port, emu.api_key, f"{base}?source=system&tail=100", 1)
    assert system[0][1]["line"].startswith("pod created")
    # Follow: a line written after the stream opened arrives on it.
    with socket.create_connection(("127.0.0.1", emu.port), timeout=5) as conn:
        request = f"GET {base}?source=container&tail=0 HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {emu.api_key}\r\n"
        conn.sendall(request.encode() + b"\r\n")
        assert b"text/event-stream" in conn.recv(4096)
        emu.admin("POST", f"/_emulator/pods/{pod['id']}/logs", {"lines": ["late line"]})
        received = b""
        deadline = time.monotonic() + 5
        while b"late line" not in received and time.monotonic() < deadline:
            received += conn.recv(4096)
        assert b"late line" in received and b"line 9" not in received
    assert emu.api("GET", f"{base}?tail=9999")[0] == 422
    assert emu.api("GET", f"{base}?since=notatime")[0] == 422
    assert emu.api("GET", "/v2/pods/nope/logs")[0] == 404
