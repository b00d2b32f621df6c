"""Bad input never crashes the server: a seeded fuzz of methods, paths, headers and bodies."""

from __future__ import annotations

import http.client
import json
import random
import socket

from emulator_helpers import GPU

PATHS = [
    "/v2/pods",
    "/v2/pods/{id}",
    "/v2/pods/{id}/action",
    "/v2/pods/{id}/logs?tail=-1",
    "/v2/network-volumes",
    "/v2/network-volumes/{id}",
    "/v2/account/ssh-keys",
    "/v2/catalog/gpus?include=AVAILABILITY",
    "/v2/catalog/datacenters?include=BOGUS",
    "/v2/billing/pods?lastN=x",
    "/v2/%00%ff/../..",
    "//[bad-ipv6/v2/pods",
    "/_emulator/faults",
    "/_emulator/clock",
    "/",
]
VALUES = [None, 0, -1, 2**70, 1.5, "", "x" * 5000, [], {}, [1, "a"], {"a": {"b": None}}, True, "🙂", "\x00"]
FIELDS = ["name", "image", "gpu", "cpu", "mounts", "env", "ports", "size", "dataCenter", "keys", "action", "kind"]


def random_body(rng: random.Random):
    choice = rng.random()
    if choice < 0.15:
        return rng.choice(VALUES)
    body = {rng.choice(FIELDS): rng.choice(VALUES) for _field in range(rng.randint(0, 5))}
    if choice < 0.5:
        body.update({"name": "f", "image": "i", "gpu": {"id": GPU, "count": rng.choice([1, 0, "2", None])}})
    return body


def test_fuzzed_requests_get_clean_answers_and_the_server_survives(memory_emulator):
    rng = random.Random(20261202)
    pod = memory_emulator.admin("POST", "/v2/pods", {"name": "t", "image": "i", "gpu": {"id": GPU}})
    statuses = set()
    for _request in range(400):
        connection = http.client.HTTPConnection("127.0.0.1", memory_emulator.port, timeout=10)
        method = rng.choice(["GET", "POST", "PUT", "PATCH", "DELETE"])
        path = rng.choice(PATHS).replace("{id}", rng.choice([pod["id"], "nope", "%2e%2e", "a" * 300]))
        headers = {"Authorization": f"Bearer {memory_emulator.api_key}"}
        if rng.random() < 0.1:
            headers["Authorization"] = rng.choice(["", "Bearer", "Bearer  ", "bearer x" * 100])
        if "logs" in path:
            method = "POST"  # a GET would open a stream; the logs route is covered elsewhere
        raw = json.dumps(random_body(rng)).encode() if rng.random() < 0.8 else bytes(rng.randbytes(rng.randint(1, 64)))
        connection.request(method, path, body=raw if method != "GET" else None, headers=headers)
        response = connection.getresponse()
        payload = response.read()
        statuses.add(response.status)
        assert response.status < 500, (method, path, raw[:200], payload[:300])
        if response.status >= 400:
            assert response.getheader("Content-Type") == "application/problem+json"
            problem = json.loads(payload)
            assert problem["status"] == response.status and problem["detail"]
        connection.close()
    assert {400, 404, 422} <= statuses
    # Garbage that is not HTTP at all, and a body that lies about its length.
    for junk in (
        b"\x16\x03\x01\x00\xff" * 20 + b"\r\n\r\n",
        b"GET /v2/pods HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n",
    ):
        with socket.create_connection(("127.0.0.1", memory_emulator.port), timeout=10) as conn:
            conn.sendall(junk)
            conn.recv(4096)
    # JSON nested deeper than Python's parser recurses: a 400 that says so, not a 500.
    connection = http.client.HTTPConnection("127.0.0.1", memory_emulator.port, timeout=10)
    headers = {"Authorization": f"Bearer {memory_emulator.api_key}", "Content-Type": "application/json"}
    connection.request("POST", "/v2/pods", body=b"[" * 100000 + b"]" * 100000, headers=headers)
    response = connection.getresponse()
    problem = json.loads(response.read())
    connection.close()
    assert response.status == 400 and "nested too deeply" in problem["detail"], problem
    assert memory_emulator.api("GET", "/v2/pods")[0] == 200
