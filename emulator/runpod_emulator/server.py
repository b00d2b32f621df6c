"""HTTP front of the emulator: auth, rate limit, faults, request record, routing, SSE logs.

Standard-library only (ThreadingHTTPServer), one thread per connection, HTTP/1.1 keep-alive.
Any failure inside a handler becomes a problem+json answer; nothing a client sends can stop the server.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from . import catalog, schema
from .clock import to_rfc3339
from .faults import FaultInjector
from .persist import JsonNumberError, loads_strict
from .problems import ApiError, bad_request, problem_body
from .ratelimit import RateLimiter
from .service import Service

LOG = logging.getLogger("runpod_emulator.server")
MAX_BODY_BYTES = 1 << 20
# RFC 9110 token: what a request method may be made of.
_METHOD_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CONTENT_LENGTH = re.compile(r"[0-9]{1,18}")
MAX_RECORDED_REQUESTS = 10000
NO_BODY = object()


class RequestRecord:
    """The /v2 requests served, for tests that check what a client sent (never the Authorization header)."""

    def __init__(self) -> None:
        self._items: deque[dict[str, Any]] = deque(maxlen=MAX_RECORDED_REQUESTS)
        self._lock = threading.Lock()

    def add(self, item: dict[str, Any]) -> None:
        with self._lock:
            self._items.append(item)

    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


class EmulatorApp:
    """Everything a request handler needs; one per server."""

    def __init__(
        self,
        service: Service,
        api_key: str,
        limiter: RateLimiter,
        info: dict[str, Any],
        log_follow_s: float = 300.0,
    ) -> None:
        self.service = service
        self.api_key = api_key
        self.limiter = limiter
        self.faults = FaultInjector()
        self.requests = RequestRecord()
        self.info = info
        self.log_follow_s = log_follow_s
        self.reset_lock = threading.Lock()
        self.stopping = threading.Event()
        self.routes = self._routes()

    def _routes(self) -> list[tuple[str, re.Pattern[str], Callable[..., tuple[int, Any]]]]:
        s = self.service
        table: list[tuple[str, str, Callable[..., tuple[int, Any]]]] = [
            ("GET", r"/v2/pods", lambda r: s.list_pods(r.query)),
            ("POST", r"/v2/pods", lambda r: s.create_pod(r.body)),
            ("GET", r"/v2/pods/(?P<id>[^/]+)", lambda r, id: s.get_pod(id)),
            ("PATCH", r"/v2/pods/(?P<id>[^/]+)", lambda r, id: s.update_pod(id, r.body)),
            ("DELETE", r"/v2/pods/(?P<id>[^/]+)", lambda r, id: s.delete_pod(id)),
            ("POST", r"/v2/pods/(?P<id>[^/]+)/action", lambda r, id: s.pod_action(id, r.body)),
            ("GET", r"/v2/pods/(?P<id>[^/]+)/logs", None),  # streamed: see Handler._stream_logs
            ("GET", r"/v2/network-volumes", lambda r: s.list_volumes()),
            ("POST", r"/v2/network-volumes", lambda r: s.create_volume(r.body)),
            ("GET", r"/v2/network-volumes/(?P<id>[^/]+)", lambda r, id: s.get_volume(id)),
            ("PATCH", r"/v2/network-volumes/(?P<id>[^/]+)", lambda r, id: s.update_volume(id, r.body)),
            ("DELETE", r"/v2/network-volumes/(?P<id>[^/]+)", lambda r, id: s.delete_volume(id)),
            ("GET", r"/v2/account/ssh-keys", lambda r: s.get_ssh_keys()),
            ("PUT", r"/v2/account/ssh-keys", lambda r: s.put_ssh_keys(r.body)),
            ("GET", r"/v2/catalog/gpus", lambda r: (200, catalog.list_gpus(r.query))),
            ("GET", r"/v2/catalog/gpus/(?P<id>[^/]+)", lambda r, id: (200, catalog.get_gpu(id, r.query))),
            ("GET", r"/v2/catalog/cpus", lambda r: (200, catalog.list_cpus(r.query))),
            ("GET", r"/v2/catalog/cpus/(?P<id>[^/]+)", lambda r, id: (200, catalog.get_cpu(id, r.query))),
            ("GET", r"/v2/catalog/datacenters", lambda r: (200, catalog.list_datacenters(r.query))),
            (
                "GET",
                r"/v2/catalog/datacenters/(?P<id>[^/]+)",
                lambda r, id: (200, catalog.get_datacenter(id, r.query)),
            ),
            ("GET", r"/v2/billing/pods", lambda r: s.pod_billing(r.query)),
            ("GET", r"/v2/billing/network-volumes", lambda r: s.volume_billing(r.query)),
            ("GET", r"/_emulator/info", lambda r: (200, self.info)),
            ("POST", r"/_emulator/faults", self._add_fault),
            ("GET", r"/_emulator/faults", lambda r: (200, {"faults": self.faults.list()})),
            ("DELETE", r"/_emulator/faults", lambda r: (self.faults.clear(), (204, None))[1]),
            ("GET", r"/_emulator/requests", lambda r: (200, {"requests": self.requests.list()})),
            ("DELETE", r"/_emulator/requests", lambda r: (self.requests.clear(), (204, None))[1]),
            ("POST", r"/_emulator/pods/(?P<id>[^/]+)/kill", lambda r, id: s.kill_pod(id, r.body)),
            ("POST", r"/_emulator/pods/(?P<id>[^/]+)/restart-without-gpus", lambda r, id: s.restart_without_gpus(id)),
            ("POST", r"/_emulator/pods/(?P<id>[^/]+)/logs", lambda r, id: s.append_logs(id, r.body)),
            ("POST", r"/_emulator/clock", lambda r: s.advance_clock(r.body)),
            ("POST", r"/_emulator/reset", self._reset),
        ]
        return [(method, re.compile(f"^{pattern}/?$"), handler) for method, pattern, handler in table]

    def _add_fault(self, request: ParsedRequest) -> tuple[int, Any]:
        body = schema.require_object(request.body)
        schema.require_valid(body, schema.FAULT)
        return 201, self.faults.add(body).json()

    def _reset(self, request: ParsedRequest) -> tuple[int, Any]:
        self.faults.clear()
        self.requests.clear()
        return self.service.reset(self.reset_lock)

    def route(self, method: str, path: str) -> tuple[Callable[..., tuple[int, Any]] | None, dict[str, str], bool]:
        """(handler, path params, streamed); raises 404/405 problems."""
        allowed = []
        for route_method, pattern, handler in self.routes:
            match = pattern.match(path)
            if match is None:
                continue
            if route_method == method:
                return handler, match.groupdict(), handler is None
            allowed.append(route_method)
        if allowed:
            raise ApiError(405, f"{method} is not supported on {path}", headers={"Allow": ", ".join(allowed)})
        raise ApiError(404, f"no such endpoint: {path}")


class ParsedRequest:
    def __init__(self, method: str, path: str, query: dict[str, list[str]], query_string: str, body: Any) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.query_string = query_string
        self.body = body


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "runpod-emulator"
    # Socket timeout: an idle keep-alive connection, or a body shorter than its Content-Length, frees its
    # thread after this long instead of holding it forever.
    timeout = 120
    app: EmulatorApp  # set on the subclass made by make_server

    def setup(self) -> None:
        super().setup()
        # Headers and body go out as two writes; without NODELAY, Nagle + delayed ACK cost 40 ms each.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:  # pylint: disable=redefined-builtin
        LOG.debug("%s " + format, self.address_string(), *args)

    def __getattr__(self, name: str) -> Any:
        """`do_<METHOD>` for every method, so an unknown one is routed (405 with `Allow` on a known path,
        404 elsewhere) instead of getting http.server's HTML 501 page."""
        if name.startswith("do_"):
            method = name[3:]
            return lambda: self._handle(method)
        raise AttributeError(name)

    def parse_request(self) -> bool:
        """http.server's request line and header parsing, minus what it lets through: HTTP/0.9 (an answer
        without status line or headers) and methods that are not RFC 9110 tokens."""
        if not super().parse_request():
            return False
        if self.request_version == "HTTP/0.9":
            self.send_error(400, "HTTP/0.9 requests are not supported: send HTTP/1.0 or HTTP/1.1")
            return False
        if not _METHOD_TOKEN.fullmatch(self.command):
            self.send_error(400, f"request method {self.command[:40]!r} is not an HTTP token")
            return False
        return True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Every error http.server answers itself (bad request line, oversized line or headers, bad version)
        as problem+json, like the API's own errors, and the connection closed."""
        self.close_connection = True
        if self.request_version in ("HTTP/0.9", "", None):
            self.request_version = "HTTP/1.0"  # so the status line and headers are written
        self.log_error("code %d, message %s", code, message)
        detail = message or explain or f"HTTP {code}"
        self._send(code, problem_body(code, detail), {}, None, problem=True)

    def _handle(self, method: str) -> None:
        record: dict[str, Any] | None = None
        extra_headers: dict[str, str] = {}
        try:
            try:
                split = urlsplit(self.path)
            except ValueError as exc:
                raise ApiError(400, f"request target {self.path[:200]!r} is not a valid URL: {exc}") from None
            path = unquote(split.path)
            query = parse_qs(split.query, keep_blank_values=True)
            body = _parse_json(self._read_body())
            is_api = path == "/v2" or path.startswith("/v2/")
            if is_api:
                record = _request_record(method, path, query, split.query, body)
            self._authenticate()
            if is_api:
                if not self._admit(method, path, record, extra_headers):
                    return
            elif not path.startswith("/_emulator/"):
                raise ApiError(404, f"no such endpoint: {path}")
            if isinstance(body, ApiError):
                raise body
            request = ParsedRequest(method, path, query, split.query, None if body is NO_BODY else body)
            self._dispatch(request, is_api, extra_headers, record)
        except ApiError as exc:
            self._send(exc.status, exc.body(), {**extra_headers, **exc.headers}, record, problem=True)
        except (ConnectionError, TimeoutError):
            self.close_connection = True
        except Exception:
            LOG.exception("unhandled error on %s %s", method, self.path)
            detail = f"internal emulator error on {method} {self.path.partition('?')[0]}: see the emulator's log"
            self._send(500, problem_body(500, detail), extra_headers, record, problem=True)

    def _admit(self, method: str, path: str, record: dict[str, Any] | None, extra_headers: dict[str, str]) -> bool:
        """Rate limit, then injected faults, of a /v2 request: raises their answers, returns False when the
        connection was dropped unanswered. Adds the rate limit headers to `extra_headers`."""
        verdict = self.app.limiter.check(self.app.api_key)
        extra_headers.update(verdict.headers)
        if not verdict.allowed:
            raise ApiError(
                429,
                f"rate limit exceeded; retry after {verdict.retry_after_s} s",
                headers={"Retry-After": str(verdict.retry_after_s)},
            )
        decision = self.app.faults.decide(method, path)
        if decision.latency_ms:
            time.sleep(decision.latency_ms / 1000.0)
        if decision.kind == "drop":
            self.app.requests.add(record)
            self._drop()
            return False
        if decision.kind in ("429", "500", "503"):
            status = int(decision.kind)
            headers = {"Retry-After": str(decision.retry_after_s)} if status in (429, 503) else {}
            raise ApiError(status, f"injected fault: {decision.kind}", headers=headers)
        return True

    def _dispatch(
        self, request: ParsedRequest, is_api: bool, extra_headers: dict[str, str], record: dict[str, Any] | None
    ) -> None:
        """Route the request and answer it (a logs request with a stream)."""
        handler, params, streamed = self.app.route(request.method, request.path)
        if streamed:
            self._stream_logs(params["id"], request, extra_headers, record)
            return
        if handler is None:
            raise ApiError(500, f"no handler for {request.method} {request.path}")
        status, payload = handler(request, **params)
        if is_api and status == 201 and self.app.faults.fail_after_create(request.method, request.path):
            raise ApiError(500, "injected fault: the pod was created, then the request failed")
        self._send(status, payload, extra_headers, record)

    def _authenticate(self) -> None:
        header = self.headers.get("Authorization", "")
        scheme, _sep, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self.app.api_key.encode()):
            raise ApiError(
                401,
                "missing or invalid API key: send Authorization: Bearer <key>",
                headers={"WWW-Authenticate": 'Bearer realm="runpod-emulator"'},
            )

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self.close_connection = True
            raise ApiError(411, "chunked request bodies are not supported: send Content-Length")
        raw_length = self.headers.get("Content-Length")
        if raw_length is None:
            return b""
        if not _CONTENT_LENGTH.fullmatch(raw_length.strip()):
            self.close_connection = True
            raise ApiError(400, f"Content-Length {raw_length[:40]!r} is not a number (ASCII digits 0-9)")
        length = int(raw_length)
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            raise ApiError(413, f"request body larger than {MAX_BODY_BYTES} bytes")
        return self.rfile.read(length) if length else b""

    def _send(
        self,
        status: int,
        payload: Any,
        headers: dict[str, str],
        record: dict[str, Any] | None,
        problem: bool = False,
    ) -> None:
        if record is not None:
            record["status"] = status
            self.app.requests.add(record)
        data = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        if payload is not None:
            self.send_header("Content-Type", "application/problem+json" if problem else "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if data and self.command != "HEAD":
            self.wfile.write(data)

    def _drop(self) -> None:
        """Injected fault: close the connection with a reset and no answer."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            return

    def _stream_logs(
        self, pod_id: str, request: ParsedRequest, headers: dict[str, str], record: dict[str, Any] | None
    ) -> None:
        service = self.app.service
        options = service.log_request(pod_id, request.query, self.headers.get("Last-Event-ID"))
        # The backlog and the follow cursor are fixed before the client sees the stream open, so a line
        # written once it has (say, by what the client does next) is followed, never skipped.
        events = service.log_events(pod_id, options["source"], options["start_after"])
        if options["start_after"] is None:
            last = max((e["t"] for e in events), default=0.0)
            events = events[-options["tail"] :] if options["tail"] else []
        else:
            last = options["start_after"]
        if record is not None:
            record["status"] = 200
            self.app.requests.add(record)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "keep-alive")
        self.send_header("X-Accel-Buffering", "no")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.close_connection = True  # the stream ends the connection
        try:
            self._follow_logs(pod_id, options["source"], events, last)
        except (ConnectionError, TimeoutError):
            raise
        except Exception:  # the headers are out: a problem+json answer would corrupt the stream, so end it
            LOG.exception("log stream of pod %s failed", pod_id)

    def _follow_logs(self, pod_id: str, source: str | None, events: list[dict[str, Any]], last: float) -> None:
        """Write `events`, then every newer one, until the follow time is up, the server stops or the pod goes."""
        service = self.app.service
        deadline = time.monotonic() + self.app.log_follow_s
        next_keepalive = time.monotonic() + 10
        while True:
            for event in events:
                self._write_event(event)
                last = max(last, event["t"])
            if events:
                self.wfile.flush()
            if time.monotonic() > deadline or self.app.stopping.is_set() or service.pod_gone(pod_id):
                return
            if time.monotonic() > next_keepalive:
                self.wfile.write(b": keepalive\n\n")
                self.wfile.flush()
                next_keepalive = time.monotonic() + 10
            time.sleep(0.5)
            events = service.log_events(pod_id, source, last)

    def _write_event(self, event: dict[str, Any]) -> None:
        stamp = to_rfc3339(event["t"])
        data = json.dumps({"source": event["source"], "line": event["line"], "ts": stamp})
        self.wfile.write(f"id: {stamp}\ndata: {data}\n\n".encode())


def _request_record(
    method: str, path: str, query: dict[str, list[str]], query_string: str, body: Any
) -> dict[str, Any]:
    """The entry of a /v2 request in the request record (its status is filled in when answered)."""
    return {
        "method": method,
        "path": path,
        "query": {k: v[0] if len(v) == 1 else v for k, v in query.items()},
        "query_string": query_string,
        "body": None if body is NO_BODY or isinstance(body, ApiError) else body,
        "status": None,
        "time": to_rfc3339(time.time()),
    }


def _parse_json(raw: bytes) -> Any:
    """The body as JSON, or the ApiError to answer. NaN, Infinity and numbers that overflow are refused
    here, so they never reach a record (a NaN clock offset on disk broke every later answer)."""
    if not raw.strip():
        return NO_BODY
    try:
        return loads_strict(raw)
    except JsonNumberError as exc:
        return bad_request(f"request body is not acceptable JSON: {exc}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return bad_request(f"request body is not valid JSON: {exc}")
    except RecursionError:
        return bad_request("request body is not valid JSON: nested too deeply")


class EmulatorHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up early is one log line; anything else keeps its traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError):
            LOG.info("connection from %s ended early: %s: %s", client_address, type(error).__name__, error)
            return
        LOG.error("unhandled error on the connection from %s", client_address, exc_info=True)


def make_server(app: EmulatorApp, host: str, port: int) -> EmulatorHTTPServer:
    handler = type("BoundHandler", (Handler,), {"app": app})
    return EmulatorHTTPServer((host, port), handler)
