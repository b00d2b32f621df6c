"""`python -m runpod_emulator serve ...`: run the RunPod v2 emulator in the foreground."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from .backends.memory import MemoryBackend
from .clock import Clock, to_rfc3339
from .engine import Engine
from .persist import StateDirBusy, StateDirLock, atomic_write_json, remove_file
from .ratelimit import DEFAULT_POLICY, RateLimiter, parse_policy
from .server import EmulatorApp, make_server
from .service import Service
from .store import Store

REPO_ROOT = Path(__file__).resolve().parents[2]
API_KEY_ENV = "RUNPOD_EMULATOR_API_KEY"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="runpod_emulator", description="Local RunPod REST v2 emulator")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the emulator in the foreground")
    serve.add_argument("--host", default="127.0.0.1", help="listen address (loopback only)")
    serve.add_argument("--port", type=int, default=0, help="listen port; 0 picks a free one")
    serve.add_argument("--state-dir", type=Path, required=True, help="where records, volumes and logs live")
    serve.add_argument("--backend", choices=["podman", "memory"], default="podman")
    key = serve.add_mutually_exclusive_group()
    key.add_argument("--api-key", help=f"Bearer key clients must send (else ${API_KEY_ENV} or --api-key-file)")
    key.add_argument("--api-key-file", type=Path, help="file holding the Bearer key")
    serve.add_argument("--pod-image", help="pod image (default: localhost/trainops-pod:<emulator/image/tag.sh>)")
    serve.add_argument("--container-prefix", default="rpemu", help="name prefix of this emulator's containers")
    serve.add_argument("--provision-seconds", type=float, help="minimum time in PROVISIONING")
    serve.add_argument("--start-seconds", type=float, help="minimum time in STARTING")
    serve.add_argument("--ssh-timeout", type=float, default=180.0, help="how long to wait for sshd to answer")
    serve.add_argument(
        "--rate-limit",
        default="",
        help="quotas, e.g. minute=60,hour=3000,day=50000 (defaults: "
        + ",".join(f"{k}={v}" for k, v in DEFAULT_POLICY.items())
        + ")",
    )
    serve.add_argument("--log-follow-seconds", type=float, default=300.0, help="how long a log stream stays open")
    serve.add_argument("--log-level", default="WARNING")
    return parser.parse_args(argv)


def resolve_api_key(args: argparse.Namespace) -> str:
    if args.api_key:
        return args.api_key
    if args.api_key_file:
        return args.api_key_file.read_text().strip()
    value = os.environ.get(API_KEY_ENV, "").strip()
    if not value:
        raise SystemExit(f"runpod_emulator: no API key: pass --api-key, --api-key-file or set {API_KEY_ENV}")
    return value


def make_backend(args: argparse.Namespace, state_dir: Path):
    if args.backend == "memory":
        return MemoryBackend(
            provision_s=0.2 if args.provision_seconds is None else args.provision_seconds,
            start_s=0.2 if args.start_seconds is None else args.start_seconds,
        )
    from .backends.base import BackendError
    from .backends.podman import PodmanBackend, default_image

    # Podman reads only the project's containers.conf (runc, slirp4netns, ulimits).
    os.environ.setdefault("CONTAINERS_CONF", str(REPO_ROOT / "config" / "containers.conf"))
    try:
        backend = PodmanBackend(
            state_dir,
            args.pod_image or default_image(),
            container_prefix=args.container_prefix,
            provision_s=args.provision_seconds or 0.0,
            start_s=args.start_seconds or 0.0,
        )
        backend.check_image()
    except BackendError as exc:
        raise SystemExit(f"runpod_emulator: {exc}") from None
    return backend


def serve(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("runpod_emulator: listen on loopback only (--host 127.0.0.1)")
    try:
        quotas = parse_policy(args.rate_limit)
    except ValueError as exc:
        raise SystemExit(f"runpod_emulator: {exc}") from None
    api_key = resolve_api_key(args)
    state_dir = args.state_dir.resolve()
    lock = StateDirLock(state_dir)
    try:
        lock.acquire()
    except StateDirBusy as exc:
        raise SystemExit(f"runpod_emulator: {exc}") from None
    store = Store(state_dir)
    clock = Clock(float(store.account.get("clockOffset", 0.0)))
    backend = make_backend(args, state_dir)
    engine = Engine(store, backend, clock, ssh_timeout_s=args.ssh_timeout)
    service = Service(store, engine, clock)
    info = {"backend": backend.name, "pid": os.getpid(), "state_dir": str(state_dir)}
    app = EmulatorApp(service, api_key, RateLimiter(quotas), info, log_follow_s=args.log_follow_seconds)
    engine.start()
    server = make_server(app, args.host, args.port)
    port = server.server_address[1]
    url = f"http://{args.host}:{port}"
    info.update({"port": port, "url": url, "api_url": f"{url}/v2", "started_at": to_rfc3339(time.time())})
    if backend.name == "podman":
        info["pod_image"] = backend.image
    atomic_write_json(state_dir / "emulator.json", info)

    stop_requested = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        stop_requested.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    print(f"runpod_emulator: {backend.name} backend listening on {url} (state {state_dir})", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        app.stopping.set()
        server.server_close()
        engine.stop()
        remove_file(state_dir / "emulator.json")
        lock.release()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
