# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The RunPod client's wire behaviour over real HTTP on 127.0.0.1: retries, errors, headers, waits."""

from __future__ import annotations

import json
import socket

import pytest

from ansible_collections.trainops.gpu.plugins.module_utils._runpod import (
    USER_AGENT,
    RunPodClient,
    RunPodError,
    RunPodWaitTimeout,
    probe_ssh_banner,
)
from ansible_collections.trainops.gpu.plugins.module_utils._version import COLLECTION_VERSION
from ansible_collections.trainops.gpu.tests.unit.plugins.module_utils.scripted_server import (
    BannerServer,
    ScriptedServer,
)

PROBLEM = {"Content-Type": "application/problem+json"}
JSON = {"Content-Type": "application/json"}


def make_client(url, sleeps, **kwargs):
    kwargs.setdefault("max_retries", 3)
    return RunPodClient(api_key="test-key-123", api_url=url, timeout=5, sleep=sleeps.append, rand=lambda: 0.5, **kwargs)


def problem(status, title, detail, errors=None):
    body = {"title": title, "status": status, "detail": detail}
    if errors:
        body["errors"] = errors
    return (status, PROBLEM, body)


def test_get_retries_gateway_errors_then_succeeds():
    script = [
        problem(503, "Service Unavailable", "try later"),
        problem(502, "Bad Gateway", "upstream"),
        (200, JSON, {"pods": [{"id": "p1"}]}),
    ]
    sleeps = []
    with ScriptedServer(script) as server:
        pods = make_client(server.url, sleeps).list_pods()
    assert pods == [{"id": "p1"}]
    assert len(server.requests) == 3
    # Capped exponential backoff, equal jitter at rand=0.5: 0.75 * base * 2**n.
    assert sleeps == [0.375, 0.75]


def test_retry_after_is_honoured_on_429():
    script = [
        (
            429,
            dict(PROBLEM, **{"Retry-After": "2"}),
            {"title": "Too Many Requests", "status": 429, "detail": "slow down"},
        ),
        (200, JSON, {"keys": []}),
    ]
    sleeps = []
    with ScriptedServer(script) as server:
        assert make_client(server.url, sleeps).get_ssh_keys() == []
    assert sleeps == [2.0]


def test_post_is_retried_on_429_only():
    script = [
        (
            429,
            dict(PROBLEM, **{"Retry-After": "1"}),
            {"title": "Too Many Requests", "status": 429, "detail": "slow down"},
        ),
        (201, JSON, {"id": "p9", "name": "x"}),
    ]
    sleeps = []
    with ScriptedServer(script) as server:
        assert make_client(server.url, sleeps).create_pod({"name": "x"})["id"] == "p9"
    assert [r["method"] for r in server.requests] == ["POST", "POST"]


def test_post_is_not_resent_after_a_server_error():
    sleeps = []
    with (
        ScriptedServer([problem(503, "Service Unavailable", "overloaded")]) as server,
        pytest.raises(RunPodError) as caught,
    ):
        make_client(server.url, sleeps).create_pod({"name": "x"})
    assert len(server.requests) == 1
    assert caught.value.ambiguous
    assert sleeps == []


def test_post_is_not_resent_after_a_dropped_connection():
    with ScriptedServer([("drop", None, None)]) as server, pytest.raises(RunPodError) as caught:
        make_client(server.url, []).create_pod({"name": "x"})
    assert len(server.requests) == 1
    assert caught.value.status is None and caught.value.ambiguous


def test_client_errors_fail_at_once_naming_call_status_title_detail_errors():
    script = [problem(422, "Unprocessable Entity", "request body invalid", ["$: additional properties 'bogus'"])]
    sleeps = []
    with ScriptedServer(script) as server, pytest.raises(RunPodError) as caught:
        make_client(server.url, sleeps).create_pod({"name": "x", "bogus": 1})
    message = str(caught.value)
    for part in ("createPod", "POST /v2/pods", "422", "Unprocessable Entity", "request body invalid", "bogus"):
        assert part in message
    assert not caught.value.ambiguous
    assert len(server.requests) == 1 and sleeps == []


def test_wrong_key_is_not_retried():
    with (
        ScriptedServer([problem(401, "Unauthorized", "invalid API key")]) as server,
        pytest.raises(RunPodError) as caught,
    ):
        make_client(server.url, []).list_pods()
    assert caught.value.status == 401 and "invalid API key" in str(caught.value)
    assert len(server.requests) == 1


def test_retries_are_bounded():
    sleeps = []
    with ScriptedServer([problem(503, "Service Unavailable", "down")]) as server, pytest.raises(RunPodError) as caught:
        make_client(server.url, sleeps, max_retries=2).list_pods()
    assert len(server.requests) == 3
    assert caught.value.attempts == 3 and "after 3 attempts" in str(caught.value)


def test_retry_after_beyond_the_limit_fails_instead_of_waiting():
    script = [
        (
            429,
            dict(PROBLEM, **{"Retry-After": "3600"}),
            {"title": "Too Many Requests", "status": 429, "detail": "quota"},
        )
    ]
    sleeps = []
    with ScriptedServer(script) as server, pytest.raises(RunPodError) as caught:
        make_client(server.url, sleeps).list_pods()
    assert sleeps == [] and "Retry-After of 3600" in str(caught.value)


def test_connection_refused_is_retried_for_reads():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    sleeps = []
    with pytest.raises(RunPodError) as caught:
        make_client(f"http://127.0.0.1:{port}", sleeps, max_retries=2).list_pods()
    assert caught.value.status is None and len(sleeps) == 2


def test_headers_auth_user_agent_and_json_body():
    with ScriptedServer([(200, JSON, {"keys": ["ssh-ed25519 AAAA a"]})]) as server:
        make_client(server.url, []).put_ssh_keys(["ssh-ed25519 AAAA a"])
    sent = server.requests[0]
    assert sent["headers"]["Authorization"] == "Bearer test-key-123"
    assert sent["headers"]["User-Agent"] == USER_AGENT == "trainops.gpu/" + COLLECTION_VERSION
    assert sent["headers"]["Content-Type"] == "application/json"
    assert json.loads(sent["body"]) == {"keys": ["ssh-ed25519 AAAA a"]}


def test_not_found_lookup_returns_none_and_delete_of_missing_is_false():
    with ScriptedServer([problem(404, "Not Found", "pod not found")]) as server:
        client = make_client(server.url, [])
        assert client.get_pod("gone") is None
        assert client.delete_pod("gone") is False


def test_query_parameters_are_encoded():
    with ScriptedServer([(200, JSON, {"records": [], "metadata": {}})]) as server:
        make_client(server.url, []).billing("pods", bucket_size="hour", last_n=24, resource_id="p 1")
    assert server.requests[0]["path"] == "/v2/billing/pods?bucketSize=hour&lastN=24&podId=p+1"


def test_probe_ssh_banner():
    with BannerServer(b"SSH-2.0-OpenSSH_9.2p1 Debian\r\n") as ssh:
        assert probe_ssh_banner("127.0.0.1", ssh.port, 2).startswith("SSH-2.0-OpenSSH")
    with BannerServer(b"HTTP/1.1 400 Bad Request\r\n") as other:
        assert probe_ssh_banner("127.0.0.1", other.port, 2) is None


def pod(status, port=None):
    direct = {"host": "127.0.0.1", "port": port, "username": "root", "command": "ssh"} if port else None
    return {"id": "p1", "name": "n", "status": status, "ports": ["22/tcp"], "ssh": {"proxy": None, "direct": direct}}


def test_wait_for_ssh_needs_running_endpoint_and_banner():
    with BannerServer(b"SSH-2.0-test\r\n") as ssh:
        script = [(200, JSON, pod("PROVISIONING")), (200, JSON, pod("RUNNING")), (200, JSON, pod("RUNNING", ssh.port))]
        with ScriptedServer(script) as server:
            ready = make_client(server.url, []).wait_for_ssh("p1", timeout=30)
    assert ready["ssh"]["direct"]["port"] == ssh.port
    assert len(server.requests) == 3


def test_wait_for_ssh_times_out_naming_what_is_missing():
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds

    with ScriptedServer([(200, JSON, pod("RUNNING"))]) as server:
        client = RunPodClient(api_key="k", api_url=server.url, sleep=sleep, clock=lambda: now[0])
        with pytest.raises(RunPodWaitTimeout) as caught:
            client.wait_for_ssh("p1", timeout=10)
    assert "p1" in str(caught.value) and "ssh.direct" in str(caught.value)
    assert caught.value.resource["id"] == "p1"
    assert now[0] >= 10


def test_wait_for_pod_fails_fast_on_error_status():
    with ScriptedServer([(200, JSON, pod("ERROR"))]) as server, pytest.raises(RunPodError) as caught:
        make_client(server.url, []).wait_for_pod("p1", ("RUNNING",), timeout=30)
    assert "ERROR" in str(caught.value)


def test_wait_for_endpoint_without_probing():
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    with ScriptedServer([(200, JSON, pod("STARTING")), (200, JSON, pod("RUNNING", port))]) as server:
        ready = make_client(server.url, []).wait_for_ssh("p1", timeout=30, probe=False)
    assert ready["ssh"]["direct"]["port"] == port
