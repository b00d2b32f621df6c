# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure helpers of the RunPod module_utils: backoff, problem+json, Retry-After, URL checks, version."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from ansible_collections.trainops.gpu.plugins.module_utils._runpod import (
    RunPodError,
    backoff_delay,
    check_api_url,
    parse_problem,
    parse_retry_after,
    pod_ssh_endpoint,
)
from ansible_collections.trainops.gpu.plugins.module_utils._version import COLLECTION_VERSION


def test_version_constant_matches_galaxy_yml():
    # galaxy.yml is the source of truth; the constant exists only because AnsiballZ cannot read it.
    root = pathlib.Path(__file__).resolve().parents[4]
    galaxy = yaml.safe_load((root / "galaxy.yml").read_text())
    assert galaxy["version"] == COLLECTION_VERSION, "run `make version` to copy galaxy.yml's version"


@pytest.mark.parametrize("attempt,low,high", [(0, 0.25, 0.5), (1, 0.5, 1.0), (3, 2.0, 4.0), (10, 15.0, 30.0)])
def test_backoff_is_exponential_capped_and_jittered(attempt, low, high):
    assert backoff_delay(attempt, base=0.5, cap=30.0, rand=lambda: 0.0) == low
    assert backoff_delay(attempt, base=0.5, cap=30.0, rand=lambda: 1.0) == high


def test_parse_problem_json():
    body = b'{"title": "Conflict", "status": 409, "detail": "pod is EXITED", "errors": ["a", {"b": 1}]}'
    assert parse_problem(409, body) == {"title": "Conflict", "detail": "pod is EXITED", "errors": ["a", '{"b": 1}']}


def test_parse_problem_non_json_keeps_an_excerpt():
    parsed = parse_problem(502, b"<html>\n<body>Bad   gateway</body></html>", "Bad Gateway")
    assert parsed["title"] == "Bad Gateway" and "Bad gateway" in parsed["detail"]


def test_parse_retry_after():
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0


def test_error_message_and_ambiguity():
    err = RunPodError("getPod", "GET", "/v2/pods/x", 404, "Not Found", "pod not found", ["e1"])
    assert str(err) == "RunPod API call getPod (GET /v2/pods/x) failed: HTTP 404 Not Found: pod not found [errors: e1]"
    assert not err.ambiguous
    assert RunPodError("createPod", "POST", "/v2/pods", None, "connection failed", "reset").ambiguous
    assert RunPodError("createPod", "POST", "/v2/pods", 500).ambiguous


@pytest.mark.parametrize(
    "url", ["https://api.runpod.io", "http://127.0.0.1:8765", "http://localhost:1", "http://[::1]:9"]
)
def test_api_url_accepted(url):
    assert check_api_url(url) == url


@pytest.mark.parametrize(
    "url,fragment",
    [
        ("http://api.runpod.io", "plain http"),
        ("https://api.runpod.io/v2", "/v2"),
        ("ftp://x", "http(s)"),
        ("", "http(s)"),
    ],
)
def test_api_url_rejected(url, fragment):
    with pytest.raises(ValueError) as caught:
        check_api_url(url)
    assert fragment in str(caught.value)


def test_ssh_endpoint():
    assert pod_ssh_endpoint({"ssh": {"direct": None}}) is None
    assert pod_ssh_endpoint({}) is None
    assert pod_ssh_endpoint({"ssh": {"direct": {"host": "127.0.0.1", "port": "2222", "username": "root"}}}) == (
        "127.0.0.1",
        2222,
        "root",
    )
