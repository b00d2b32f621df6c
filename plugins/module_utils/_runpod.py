# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""RunPod REST API v2 client: the only code in the collection that speaks HTTP to RunPod.

What it does for every caller (modules, inventory, roles' helpers):

* Bearer authentication, a User-Agent naming the collection version, per-request timeouts.
* Retries with capped exponential backoff and jitter on 429 (honouring ``Retry-After``),
  502/503/504 and connection errors, for idempotent requests only (GET, PUT, DELETE, and a PATCH
  the caller marks idempotent because its body sets absolute values). A POST is retried only on
  429, which means the request was refused before it was processed; any other failure of a POST
  is *ambiguous* (it may have taken effect) and is raised so that the caller reconciles by
  reading state back, never by blindly re-posting.
* :meth:`RunPodClient.reconcile`, the one loop that settles such an ambiguous failure (of a create, of a
  pod action) by reading the state back, re-sending only what evidently did not happen, with the same
  injectable sleep and backoff as the retries.
* The pod statuses and their groupings (coming up, stopped, failed) every caller shares.
* RFC 9457 problem+json responses become one :class:`RunPodError` naming the call, the status,
  ``title``, ``detail`` and ``errors``.
* Bounded wait helpers: a pod reaching a status, and a pod's direct SSH endpoint answering with
  an SSH banner (RUNNING alone is not ready).
"""

from __future__ import annotations

import ipaddress
import json
import random
import socket
import time
from email.utils import parsedate_to_datetime
from http.client import HTTPException
from urllib.error import HTTPError, URLError
from urllib.parse import quote, urlencode, urlparse

from ansible.module_utils.urls import Request

from ansible_collections.trainops.gpu.plugins.module_utils._version import COLLECTION_VERSION

DEFAULT_API_URL = "https://api.runpod.io"
API_KEY_ENV = "RUNPOD_API_KEY"
API_URL_ENV = "RUNPOD_API_URL"
USER_AGENT = "trainops.gpu/" + COLLECTION_VERSION

IDEMPOTENT_METHODS = frozenset(("GET", "HEAD", "PUT", "DELETE"))
RETRYABLE_STATUSES = frozenset((429, 502, 503, 504))

# Pod statuses as the API reports them, and the groupings every caller uses.
PROVISIONING = "PROVISIONING"
STARTING = "STARTING"
RUNNING = "RUNNING"
EXITED = "EXITED"
ERROR = "ERROR"
TERMINATED = "TERMINATED"
POD_STATUSES = (PROVISIONING, STARTING, RUNNING, EXITED, ERROR, TERMINATED)
# On the way to RUNNING.
POD_COMING_UP = frozenset((PROVISIONING, STARTING))
# Not running; a start brings the pod back.
POD_STOPPED = frozenset((EXITED, ERROR))
# Where a wait for any other status ends.
POD_FAILED_STATUSES = frozenset((ERROR, TERMINATED))


class RunPodError(Exception):
    """A failed RunPod API call, or a failed wait.

    ``status`` is None for a connection-level failure (refused, reset, timed out).
    """

    def __init__(
        self,
        operation,
        method,
        path,
        status=None,
        title=None,
        detail=None,
        errors=None,
        attempts=1,
    ):
        self.operation = operation
        self.method = method
        self.path = path
        self.status = status
        self.title = title
        self.detail = detail
        self.errors = list(errors or [])
        self.attempts = attempts
        super(RunPodError, self).__init__(self.message)

    def __str__(self):
        # Computed on demand: a caller may add detail after construction.
        return self.message

    @property
    def message(self) -> str:
        call = "%s %s" % (self.method, self.path)
        if self.operation:
            call = "%s (%s)" % (self.operation, call)
        if self.status is None:
            text = "RunPod API call %s failed: no HTTP response" % call
        else:
            text = "RunPod API call %s failed: HTTP %s" % (call, self.status)
        if self.title:
            text += " %s" % self.title
        if self.detail:
            text += ": %s" % self.detail
        if self.errors:
            text += " [errors: %s]" % "; ".join(str(e) for e in self.errors)
        if self.attempts > 1:
            text += " (after %d attempts)" % self.attempts
        return text

    @property
    def ambiguous(self) -> bool:
        """True when the request may have taken effect although it failed (5xx, no response)."""
        return self.status is None or self.status >= 500

    def to_dict(self) -> dict:
        return {
            "operation": self.operation,
            "method": self.method,
            "path": self.path,
            "status": self.status,
            "title": self.title,
            "detail": self.detail,
            "errors": self.errors,
            "attempts": self.attempts,
        }


class RunPodUnreconciled(Exception):
    """A request that may have taken effect failed, and reading the state back did not settle it.

    ``failure`` is the request's RunPodError, ``state`` the last state read back, and ``read_error`` the
    RunPodError of a read back that failed itself (then ``state`` is None).
    """

    def __init__(self, failure, state=None, read_error=None):
        self.failure = failure
        self.state = state
        self.read_error = read_error
        super(RunPodUnreconciled, self).__init__(str(read_error or failure))


class RunPodWaitTimeout(Exception):
    """A bounded wait ran out; ``resource`` is the last state read (it names what is left)."""

    def __init__(self, message, resource=None):
        self.resource = resource
        super(RunPodWaitTimeout, self).__init__(message)


class RunPodSshUnreachable(Exception):
    """A wait for SSH that can never finish: the pod will never get ``ssh.direct`` (see :func:`ssh_never_direct`).

    ``cause`` is ``no_public_ip`` or ``no_ssh_port``; ``resource`` is the pod as last read.
    """

    def __init__(self, message, cause, resource=None):
        self.cause = cause
        self.resource = resource
        super(RunPodSshUnreachable, self).__init__(message)


def parse_problem(status, body, reason=None) -> dict:
    """Turn an error response body into ``{title, detail, errors}``.

    Accepts RFC 9457 problem+json; falls back to the reason phrase and a short excerpt of a body
    that is not JSON (a proxy's HTML page, for example).
    """
    title = reason or None
    detail = None
    errors = []
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
    data = None
    if text.strip():
        try:
            data = json.loads(text)
        except ValueError:
            detail = " ".join(text.split())[:300]
    if isinstance(data, dict):
        title = data.get("title") or title
        detail = data.get("detail") or data.get("message") or data.get("error") or detail
        raw_errors = data.get("errors") or []
        if isinstance(raw_errors, list):
            errors = [e if isinstance(e, str) else json.dumps(e, sort_keys=True) for e in raw_errors]
        else:
            errors = [str(raw_errors)]
    return {"title": title, "detail": detail, "errors": errors}


def parse_retry_after(value, now=None):
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP-date); None if absent/invalid."""
    if value is None:
        return None
    value = str(value).strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


# The exponent of every backoff stops growing here: 2**62 is past any cap, and an uncapped exponent overflows a
# float after about a thousand attempts (a wait of a few thousand seconds polling every 5 s).
MAX_BACKOFF_EXPONENT = 62
# The longest wait_timeout a wait accepts: six hours. A pod that is not ready by then will not be; a larger
# value is a mistake (minutes taken for seconds) and is refused before anything is created.
MAX_WAIT_TIMEOUT = 6 * 3600


def capped_step(attempt, base, cap) -> float:
    """``min(cap, base * 2**attempt)`` for any ``attempt``, without overflowing."""
    return min(float(cap), float(base) * 2.0 ** min(max(int(attempt), 0), MAX_BACKOFF_EXPONENT))


def backoff_delay(attempt, base=0.5, cap=30.0, rand=random.random) -> float:
    """Capped exponential backoff with equal jitter for retry number ``attempt`` (0-based).

    Half of the capped exponential step is fixed and half is random, so concurrent clients spread
    out without any retry collapsing to an immediate one.
    """
    step = capped_step(attempt, base, cap)
    return step / 2.0 + rand() * step / 2.0


def check_wait_timeout(timeout) -> float:
    """``timeout`` as seconds when it is within 1 .. MAX_WAIT_TIMEOUT; ValueError naming the bound otherwise."""
    try:
        seconds = float(timeout)
    except (TypeError, ValueError):
        raise ValueError("wait_timeout must be a number of seconds, got %r" % (timeout,)) from None
    if not 1 <= seconds <= MAX_WAIT_TIMEOUT:
        raise ValueError(
            "wait_timeout must be from 1 to %d seconds (%d hours), got %s"
            % (MAX_WAIT_TIMEOUT, MAX_WAIT_TIMEOUT // 3600, timeout)
        )
    return seconds


def check_api_url(api_url) -> str:
    """Validate the API base URL; plain HTTP is allowed only to loopback (a local emulator)."""
    parsed = urlparse(api_url or "")
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError("api_url must be an http(s) URL such as %s, got %r" % (DEFAULT_API_URL, api_url))
    if parsed.scheme == "http" and not _is_loopback(parsed.hostname):
        raise ValueError(
            "api_url %r uses plain http to a non-loopback host: the API key would travel unencrypted; use https"
            % api_url
        )
    if parsed.path.rstrip("/").endswith("/v2"):
        raise ValueError("api_url is the server root (for example %s), without the /v2 suffix" % DEFAULT_API_URL)
    return api_url


def _is_loopback(hostname) -> bool:
    if hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False


def encode_query(query) -> str:
    """URL-encode query parameters given as a dict or a list of pairs, dropping None values."""
    if not query:
        return ""
    pairs = query.items() if isinstance(query, dict) else query
    return urlencode([(key, value) for key, value in pairs if value is not None])


def pod_status(pod) -> str:
    """The pod's status; a pod that is gone (None, as a 404 reads) counts as TERMINATED."""
    return (pod or {}).get("status") or TERMINATED


def pod_ssh_endpoint(pod):
    """``(host, port, username)`` of the pod's direct SSH endpoint, or None while it has none."""
    ssh = (pod or {}).get("ssh") or {}
    direct = ssh.get("direct") or {}
    host = direct.get("host")
    port = direct.get("port")
    if not host or not port:
        return None
    return host, int(port), direct.get("username") or "root"


SSH_PORT = "22/tcp"
# A pod seen to never get ssh.direct is looked at this many more times, NO_SSH_GRACE_POLL_S apart at least,
# before the SSH wait gives up on it (the API may show a machine's port mapping a moment late).
NO_SSH_GRACE_POLLS = 2
NO_SSH_GRACE_POLL_S = 1.0


def ssh_never_direct(pod):
    """``(cause, message)`` when the pod will never get ``ssh.direct``, else None (it may still come).

    ``no_ssh_port``: ``22/tcp`` is not in the pod's ``ports`` (when the pod shows them), or the RUNNING pod's
    machine (``runtime`` shown; RunPod's ``ssh.proxy`` is then set too) maps ports but none for 22/tcp.
    ``no_public_ip``: ``runtime.ports`` shows 22/tcp with no public mapping (``public`` or ``ip`` null), as on
    COMMUNITY hosts without a public IP. Before the pod runs on a machine that shows its port mappings nothing
    can be told, and None is returned.
    """
    if not pod:
        return None
    pod_id = pod.get("id") or "?"
    ports = pod.get("ports") or []
    if "ports" in pod and SSH_PORT not in ports:
        return (
            "no_ssh_port",
            "pod %s has no %s in its ports (%s), so it never gets ssh.direct: add 22/tcp to ports "
            "(runpod_pod ports, then start the pod again, or create it again)"
            % (pod_id, SSH_PORT, ", ".join(ports) or "none"),
        )
    if pod_status(pod) != RUNNING or pod_ssh_endpoint(pod) is not None:
        return None
    runtime = pod.get("runtime")
    if not isinstance(runtime, dict) or not isinstance(runtime.get("ports"), list) or not runtime["ports"]:
        return None
    mappings = [
        entry
        for entry in runtime["ports"]
        if isinstance(entry, dict) and entry.get("private") == 22 and (entry.get("type") or "tcp") == "tcp"
    ]
    if not mappings:
        return (
            "no_ssh_port",
            "pod %s is RUNNING but its runtime.ports has no 22/tcp mapping, so it never gets ssh.direct: "
            "add 22/tcp to ports (runpod_pod ports) and create the pod again" % pod_id,
        )
    if any(entry.get("public") and entry.get("ip") for entry in mappings):
        return None
    where = "%s cloud, data center %s" % (pod.get("cloud") or "?", pod.get("dataCenterId") or "?")
    return (
        "no_public_ip",
        "pod %s runs on a host without a public IP (%s): runtime.ports maps 22/tcp to no public port, so "
        "ssh.direct never comes (RunPod's SSH proxy carries an interactive shell only, no rsync or Ansible). "
        "Create it in the SECURE cloud (cloud: SECURE), or in another data center or on a host with public IPs"
        % (pod_id, where),
    )


def probe_ssh_banner(host, port, timeout=5.0):
    """The SSH identification line the server sends first, or None if it does not answer with one."""
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            sock.settimeout(timeout)
            received = b""
            while b"\n" not in received and len(received) < 256:
                chunk = sock.recv(256)
                if not chunk:
                    break
                received += chunk
    except (OSError, ValueError):
        return None
    line = received.split(b"\n", 1)[0].strip().decode("ascii", "replace")
    return line if line.startswith("SSH-") else None


def http_error(operation, method, path, exc, attempt):
    """``(RunPodError, Retry-After seconds or None)`` for an HTTP error response."""
    try:
        payload = exc.read()
    except (OSError, HTTPException):
        payload = b""
    retry_after = parse_retry_after(exc.headers.get("Retry-After") if exc.headers else None)
    problem = parse_problem(exc.code, payload, getattr(exc, "reason", None))
    return RunPodError(operation, method, path, exc.code, attempts=attempt, **problem), retry_after


def decode_payload(operation, method, path, status, payload, attempt):
    """The JSON body of a successful response; None when it is empty."""
    if not payload or not payload.strip():
        return None
    try:
        return json.loads(payload.decode("utf-8"))
    except ValueError:
        raise RunPodError(
            operation,
            method,
            path,
            status,
            title="invalid JSON in response",
            detail=payload[:200].decode("utf-8", "replace"),
            attempts=attempt,
        ) from None


class RunPodClient(object):
    """RunPod REST v2 over HTTPS (or plain HTTP to a local emulator)."""

    def __init__(
        self,
        api_key,
        api_url=DEFAULT_API_URL,
        timeout=30.0,
        max_retries=5,
        backoff_base=0.5,
        backoff_cap=30.0,
        max_retry_after=120.0,
        validate_certs=True,
        sleep=time.sleep,
        rand=random.random,
        clock=time.monotonic,
    ):
        if not api_key:
            raise ValueError("a RunPod API key is required: set api_key or the %s environment variable" % API_KEY_ENV)
        self.api_url = (api_url or DEFAULT_API_URL).rstrip("/")
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff_base = float(backoff_base)
        self.backoff_cap = float(backoff_cap)
        self.max_retry_after = float(max_retry_after)
        self._sleep = sleep
        self._rand = rand
        self._clock = clock
        # Counts HTTP attempts, retries included: the inventory and the benchmark report it.
        self.http_attempts = 0
        self._request = Request(
            headers={
                "Authorization": "Bearer %s" % api_key,
                "Accept": "application/json, application/problem+json",
            },
            http_agent=USER_AGENT,
            timeout=self.timeout,
            validate_certs=validate_certs,
            follow_redirects="none",
        )

    # -- transport ---------------------------------------------------------------------------

    def request(self, operation, method, path, query=None, body=None, idempotent=None, not_found_ok=False):
        """Send one API call with the retry policy; return the decoded JSON body (None when empty).

        ``not_found_ok`` turns a 404 into a None result (for lookups by id).
        """
        method = method.upper()
        retry_all = method in IDEMPOTENT_METHODS if idempotent is None else bool(idempotent)
        url = self.api_url + path
        encoded = encode_query(query)
        if encoded:
            url += "?" + encoded
        data = None
        headers = {}
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        attempt = 0
        while True:
            attempt += 1
            self.http_attempts += 1
            try:
                response = self._request.open(method, url, data=data, headers=headers)
                payload = response.read()
                status = response.getcode()
            except HTTPError as exc:
                if exc.code == 404 and not_found_ok:
                    return None
                error, retry_after = http_error(operation, method, path, exc, attempt)
                retryable = error.status in RETRYABLE_STATUSES and (retry_all or error.status == 429)
                self._retry_or_raise(error, retryable, attempt, retry_after)
                continue
            except (URLError, HTTPException, socket.timeout, ConnectionError, OSError) as exc:
                reason = getattr(exc, "reason", None) or exc
                error = RunPodError(
                    operation, method, path, None, title="connection failed", detail=str(reason), attempts=attempt
                )
                self._retry_or_raise(error, retry_all, attempt, None)
                continue
            return decode_payload(operation, method, path, status, payload, attempt)

    def _retry_or_raise(self, error, retryable, attempt, retry_after):
        if not retryable or attempt > self.max_retries:
            raise error
        if retry_after is not None:
            if retry_after > self.max_retry_after:
                error.detail = "%s; Retry-After of %ss exceeds the %ss this client waits" % (
                    error.detail or "rate limited",
                    retry_after,
                    self.max_retry_after,
                )
                raise error
            delay = retry_after
        else:
            delay = self.backoff(attempt - 1)
        self._sleep(delay)

    def backoff(self, attempt) -> float:
        """The pause before retry number ``attempt`` (0-based), by this client's backoff policy."""
        return backoff_delay(attempt, self.backoff_base, self.backoff_cap, self._rand)

    @staticmethod
    def poll_delay(attempt, poll_cap=5.0) -> float:
        """The pause before poll number ``attempt`` (0-based) of a wait: 0.25 s doubling, at most ``poll_cap``."""
        return capped_step(attempt, 0.25, poll_cap)

    def reconcile(self, send, read_back, took_effect, read_back_on=(), recheck_s=None):
        """Send a request that must not be repeated blindly; settle a failure by reading the state back.

        ``send()`` makes the request: its result is returned as ``(result, None)``. When it fails
        ambiguously (5xx, no response: it may have taken effect), or with a status in ``read_back_on`` (a
        refusal that may mean the state already is what was asked), ``read_back()`` reads the state, once
        more ``recheck_s`` seconds later when given and the first read falls short, and
        ``took_effect(state)`` judges it: yes returns ``(state, failure)``; no re-sends an ambiguous
        failure, at most ``max_retries`` times with this client's backoff. Any other RunPodError of
        ``send()`` is raised as it is; RunPodUnreconciled when a read back fails, when a ``read_back_on``
        refusal did not take effect, or when the retries run out.
        """
        attempt = 0
        while True:
            try:
                return send(), None
            except RunPodError as exc:
                if not (exc.ambiguous or exc.status in read_back_on):
                    raise
                failure = exc
            try:
                state = read_back()
                if recheck_s is not None and not took_effect(state):
                    self._sleep(recheck_s)
                    state = read_back()
            except RunPodError as exc:
                raise RunPodUnreconciled(failure, read_error=exc) from exc
            if took_effect(state):
                return state, failure
            attempt += 1
            if not failure.ambiguous or attempt > self.max_retries:
                raise RunPodUnreconciled(failure, state)
            self._sleep(self.backoff(attempt - 1))

    # -- pods --------------------------------------------------------------------------------

    def list_pods(self, include_cluster_pods=False) -> list:
        query = {"includeClusterPods": "true"} if include_cluster_pods else None
        return (self.request("listPods", "GET", "/v2/pods", query=query) or {}).get("pods") or []

    def get_pod(self, pod_id):
        return self.request("getPod", "GET", "/v2/pods/%s" % quote(pod_id, safe=""), not_found_ok=True)

    def create_pod(self, body) -> dict:
        return self.request("createPod", "POST", "/v2/pods", body=body)

    def update_pod(self, pod_id, body) -> dict:
        # PATCH with absolute values: repeating it converges on the same pod, so retrying is safe.
        return self.request("updatePod", "PATCH", "/v2/pods/%s" % quote(pod_id, safe=""), body=body, idempotent=True)

    def pod_action(self, pod_id, action):
        return self.request("podAction", "POST", "/v2/pods/%s/action" % quote(pod_id, safe=""), body={"action": action})

    def delete(self, operation, path) -> bool:
        """DELETE a resource; False when it was already gone (404)."""
        try:
            self.request(operation, "DELETE", path)
        except RunPodError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def delete_pod(self, pod_id) -> bool:
        return self.delete("deletePod", "/v2/pods/%s" % quote(pod_id, safe=""))

    # -- account -----------------------------------------------------------------------------

    def get_ssh_keys(self) -> list:
        return (self.request("getSshKeys", "GET", "/v2/account/ssh-keys") or {}).get("keys") or []

    def put_ssh_keys(self, keys) -> list:
        result = self.request("updateSshKeys", "PUT", "/v2/account/ssh-keys", body={"keys": list(keys)}) or {}
        return result.get("keys", list(keys))

    # -- network volumes ---------------------------------------------------------------------

    def list_network_volumes(self) -> list:
        return (self.request("listNetworkVolumes", "GET", "/v2/network-volumes") or {}).get("networkVolumes") or []

    def get_network_volume(self, volume_id):
        path = "/v2/network-volumes/%s" % quote(volume_id, safe="")
        return self.request("getNetworkVolume", "GET", path, not_found_ok=True)

    def create_network_volume(self, body) -> dict:
        return self.request("createNetworkVolume", "POST", "/v2/network-volumes", body=body)

    def update_network_volume(self, volume_id, body) -> dict:
        path = "/v2/network-volumes/%s" % quote(volume_id, safe="")
        return self.request("updateNetworkVolume", "PATCH", path, body=body, idempotent=True)

    def delete_network_volume(self, volume_id) -> bool:
        return self.delete("deleteNetworkVolume", "/v2/network-volumes/%s" % quote(volume_id, safe=""))

    # -- catalog and billing -----------------------------------------------------------------

    def list_gpu_types(self, availability=False, gpu_count=None, cloud=None, min_cuda_version=None) -> list:
        query = []
        if availability:
            # include and product are comma-separated (style form, explode false).
            query += [("include", "AVAILABILITY"), ("product", "POD")]
            if gpu_count:
                query.append(("count", str(gpu_count)))
            # cloud, count and minCudaVersion are valid only with include=AVAILABILITY (400 otherwise).
            if cloud:
                query.append(("cloud", cloud))
            if min_cuda_version:
                query.append(("minCudaVersion", min_cuda_version))
        return (self.request("listGpuTypes", "GET", "/v2/catalog/gpus", query=query or None) or {}).get("gpus") or []

    def list_data_centers(self, gpu_availability=False) -> list:
        query = [("include", "GPU_AVAILABILITY")] if gpu_availability else None
        result = self.request("listDataCenters", "GET", "/v2/catalog/datacenters", query=query) or {}
        return result.get("dataCenters") or []

    def billing(self, resource, start_time=None, end_time=None, bucket_size=None, last_n=None, resource_id=None):
        """``resource`` is ``pods`` or ``network-volumes``; returns ``{records, metadata}``."""
        id_param = {"pods": "podId", "network-volumes": "networkVolumeId"}[resource]
        operation = {"pods": "listPodBilling", "network-volumes": "listNetworkVolumeBilling"}[resource]
        query = [
            ("startTime", start_time),
            ("endTime", end_time),
            ("bucketSize", bucket_size),
            ("lastN", None if last_n is None else str(last_n)),
            (id_param, resource_id),
        ]
        return self.request(operation, "GET", "/v2/billing/%s" % resource, query=query) or {}

    # -- waits -------------------------------------------------------------------------------

    def wait_for_pod(self, pod_id, statuses, timeout, fail_statuses=POD_FAILED_STATUSES, poll_cap=5.0):
        """Poll a pod until its status is in ``statuses``; bounded by ``timeout`` seconds.

        A pod that disappears (404) counts as TERMINATED. Raises RunPodWaitTimeout on timeout and
        RunPodError if the pod lands in a failure status it was not waited for.
        """
        wanted = frozenset(statuses)
        deadline = self._clock() + check_wait_timeout(timeout)
        attempt = 0
        pod = None
        while True:
            pod = self.get_pod(pod_id)
            status = pod_status(pod)
            if status in wanted:
                return pod
            if status in fail_statuses:
                raise RunPodError(
                    "waitForPod",
                    "GET",
                    "/v2/pods/%s" % pod_id,
                    None,
                    title="pod %s is %s" % (pod_id, status),
                    detail="waiting for %s" % "/".join(sorted(wanted)),
                )
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise RunPodWaitTimeout(
                    "pod %s still %s after %ss waiting for %s" % (pod_id, status, timeout, "/".join(sorted(wanted))),
                    pod,
                )
            self._sleep(min(remaining, self.poll_delay(attempt, poll_cap)))
            attempt += 1

    def wait_for_ssh(self, pod_id, timeout, probe=True, poll_cap=5.0, probe_timeout=5.0):
        """Wait until the pod is RUNNING, has ``ssh.direct`` and (with ``probe``) that port answers with an SSH banner.

        Returns the pod as last read. Bounded by ``timeout`` seconds; on timeout raises
        RunPodWaitTimeout whose message says which condition was still missing. A pod that will never get
        ``ssh.direct`` (:func:`ssh_never_direct`: no public IP, no 22/tcp) raises RunPodSshUnreachable once
        NO_SSH_GRACE_POLLS more polls still show it, not at the timeout.
        """
        deadline = self._clock() + check_wait_timeout(timeout)
        attempt = 0
        missing = "status RUNNING"
        never_seen = 0
        while True:
            pod = self.get_pod(pod_id)
            status = pod_status(pod)
            if status in POD_FAILED_STATUSES:
                raise RunPodError(
                    "waitForSsh",
                    "GET",
                    "/v2/pods/%s" % pod_id,
                    None,
                    title="pod %s is %s" % (pod_id, status),
                    detail="waiting for RUNNING with a reachable SSH endpoint",
                )
            never = ssh_never_direct(pod)
            never_seen = never_seen + 1 if never else 0
            if never and never_seen > NO_SSH_GRACE_POLLS:
                raise RunPodSshUnreachable(never[1], never[0], pod)
            if status == RUNNING:
                endpoint = pod_ssh_endpoint(pod)
                if never:
                    missing = "an ssh.direct endpoint, which never comes: %s" % never[1]
                elif endpoint is None:
                    missing = "an ssh.direct endpoint (is 22/tcp in ports?)"
                else:
                    remaining = max(0.5, min(probe_timeout, deadline - self._clock()))
                    if not probe or probe_ssh_banner(endpoint[0], endpoint[1], remaining):
                        return pod
                    missing = "an SSH banner from %s:%s" % (endpoint[0], endpoint[1])
            else:
                missing = "status RUNNING (now %s)" % status
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise RunPodWaitTimeout(
                    "pod %s not ready for SSH after %ss: still waiting for %s" % (pod_id, timeout, missing), pod
                )
            delay = self.poll_delay(attempt, poll_cap)
            if never:
                delay = max(delay, NO_SSH_GRACE_POLL_S)
            self._sleep(min(remaining, delay))
            attempt += 1
