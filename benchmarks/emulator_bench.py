#!/usr/bin/env python
"""Emulator benchmark (not a test): figures for the RunPod v2 emulator, each against a baseline
measured in the same run.

1. create-to-SSH-ready on the podman backend, median of 5: POST /v2/pods until `ssh root@127.0.0.1 -p
   <ssh.direct.port> true` succeeds. Baseline: the same image started by a bare `podman run` with the
   same key, until the same ssh command succeeds (what the emulator adds on top of podman).
2. memory-backend request throughput (GET /v2/pods/{id}, keep-alive, 1 and 4 client threads).
   Baseline: a bare standard-library ThreadingHTTPServer answering the same JSON.
3. resident memory (VmRSS) of a memory-backend emulator holding 1,000 pods. Baseline: the same
   emulator holding none.

Run: .venv/bin/python benchmarks/emulator_bench.py [--skip-podman] [--pods 1000] [--requests 4000]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from runpod_emulator.backends.podman import default_image, run_command
from runpod_emulator.testing import EmulatorProcess, wait_for_login

ROOT = Path(__file__).resolve().parents[1]

GPU = "NVIDIA H100 80GB HBM3"


def podman_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(ROOT / "config" / "containers.conf"))
    return env


def bench_ssh_ready(workdir: Path, rounds: int) -> None:
    key = workdir / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, timeout=30)
    public_key = key.with_suffix(".pub").read_text().strip()
    env = podman_env()
    baseline = []
    for index in range(rounds):
        name = f"rpemu-bench-base-{os.getpid()}-{index}"
        started = time.monotonic()
        # The emulator's own podman arguments, without the emulator around them.
        args, run_env = run_command(default_image(), name, env={"PUBLIC_KEY": public_key}, base_env=env)
        run = subprocess.run(["podman", *args], capture_output=True, text=True, env=run_env, timeout=120, check=True)
        try:
            mapping = subprocess.run(
                ["podman", "port", name, "22/tcp"], capture_output=True, text=True, env=env, timeout=30, check=True
            )
            wait_for_login(key, int(mapping.stdout.strip().rsplit(":", 1)[1]), 120, poll_s=0.05)
            baseline.append(time.monotonic() - started)
        finally:
            subprocess.run(
                ["podman", "rm", "-f", "-t", "0", run.stdout.strip()],
                capture_output=True,
                env=env,
                timeout=60,
                check=False,
            )
    emulated = []
    with EmulatorProcess(backend="podman", state_dir=workdir / "podman-emu") as emu:
        emu.admin("PUT", "/v2/account/ssh-keys", {"keys": [public_key]})
        body = {"name": "bench", "image": "i", "gpu": {"id": GPU}, "ports": ["22/tcp"], "startSsh": True}
        for _round in range(rounds):
            started = time.monotonic()
            pod = emu.admin("POST", "/v2/pods", body)
            ready = emu.wait_for(pod["id"], lambda p: p["ssh"]["direct"] is not None, 120)
            wait_for_login(key, ready["ssh"]["direct"]["port"], 120, poll_s=0.05)
            emulated.append(time.monotonic() - started)
            emu.admin("DELETE", f"/v2/pods/{pod['id']}")
    base, emul = statistics.median(baseline), statistics.median(emulated)
    print(f"create-to-SSH-ready (podman), median of {rounds}:")
    print(f"  emulator POST /v2/pods -> ssh true : {emul:6.2f} s   (runs: {', '.join(f'{t:.2f}' for t in emulated)})")
    print(f"  baseline bare podman run -> ssh true: {base:6.2f} s   (runs: {', '.join(f'{t:.2f}' for t in baseline)})")
    print(f"  ratio emulator / baseline            : {emul / base:6.2f}")


class _FixedJson(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    payload = b"{}"

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as the emulator does

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.payload)))
        self.end_headers()
        self.wfile.write(self.payload)

    def log_message(self, format: str, *args: object) -> None:  # pylint: disable=redefined-builtin
        return


def measure_rps(port: int, path: str, headers: dict[str, str], total: int, threads: int) -> float:
    per_thread = total // threads
    failures: list[str] = []

    def worker() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            for _request in range(per_thread):
                connection.request("GET", path, headers=headers)
                response = connection.getresponse()
                response.read()
                if response.status != 200:
                    failures.append(f"GET {path} on port {port} answered {response.status}")
                    return
        except OSError as exc:
            failures.append(f"GET {path} on port {port} failed: {exc}")
        finally:
            connection.close()

    workers = [threading.Thread(target=worker) for _index in range(threads)]
    started = time.perf_counter()
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    elapsed = time.perf_counter() - started
    if failures:  # a figure from threads that gave up early would overstate the rate
        raise RuntimeError(failures[0])
    return per_thread * threads / elapsed


def bench_throughput(workdir: Path, total: int) -> None:
    unlimited = ["--rate-limit", "minute=100000000,hour=100000000,day=100000000"]
    with EmulatorProcess(backend="memory", state_dir=workdir / "throughput-emu", extra_args=unlimited) as emu:
        pod = emu.admin("POST", "/v2/pods", {"name": "t", "image": "i", "gpu": {"id": GPU}, "ports": ["22/tcp"]})
        emu.wait_for(pod["id"], lambda p: p["status"] == "RUNNING")
        body = json.dumps(emu.admin("GET", f"/v2/pods/{pod['id']}")).encode()
        headers = {"Authorization": f"Bearer {emu.api_key}"}
        handler = type("Fixed", (_FixedJson,), {"payload": body})
        baseline_server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        baseline_server.daemon_threads = True
        threading.Thread(target=baseline_server.serve_forever, daemon=True).start()
        try:
            print(f"memory-backend throughput, GET /v2/pods/{{id}} ({total} requests, keep-alive):")
            for threads in (1, 4):
                emulated = measure_rps(emu.port, f"/v2/pods/{pod['id']}", headers, total, threads)
                baseline = measure_rps(baseline_server.server_address[1], "/", {}, total, threads)
                print(
                    f"  {threads} client thread(s): emulator {emulated:7.0f} req/s, bare stdlib server "
                    f"{baseline:7.0f} req/s, ratio {emulated / baseline:.2f}"
                )
            started = time.perf_counter()
            creates = 200
            for index in range(creates):
                emu.admin(
                    "POST", "/v2/pods", {"name": f"c{index}", "image": "i", "cpu": {"id": "cpu3c", "vcpuCount": 2}}
                )
            print(f"  POST /v2/pods (each record fsynced): {creates / (time.perf_counter() - started):7.0f} creates/s")
        finally:
            baseline_server.shutdown()


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def bench_memory(workdir: Path, pods: int) -> None:
    with EmulatorProcess(backend="memory", state_dir=workdir / "rss-emu") as emu:
        emu.admin("GET", "/v2/pods")
        time.sleep(0.5)
        empty = rss_kib(emu.pid)
        started = time.perf_counter()
        ids = []
        for index in range(pods):
            body = {"name": f"p{index}", "image": "i", "gpu": {"id": GPU}, "ports": ["22/tcp"], "env": {"K": "v"}}
            ids.append(emu.admin("POST", "/v2/pods", body)["id"])
        created_s = time.perf_counter() - started
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            statuses = [p["status"] for p in emu.admin("GET", "/v2/pods")["pods"]]
            if statuses.count("RUNNING") == pods:
                break
            time.sleep(0.5)
        list_started = time.perf_counter()
        listed = emu.admin("GET", "/v2/pods")["pods"]
        list_s = time.perf_counter() - list_started
        full = rss_kib(emu.pid)
    print(f"resident memory, memory backend, {pods} pods (all RUNNING: {statuses.count('RUNNING') == pods}):")
    print(f"  emulator with {pods} pods: {full / 1024:7.1f} MiB")
    print(f"  baseline with 0 pods     : {empty / 1024:7.1f} MiB")
    print(f"  ratio {full / empty:.2f}, {(full - empty) / pods:.1f} KiB per pod")
    print(
        f"  creating them took {created_s:.1f} s ({pods / created_s:.0f}/s); listing {len(listed)} took {list_s:.3f} s"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--skip-podman", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=4000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="emulator-bench-") as tmp:
        workdir = Path(tmp)
        if not args.skip_podman:
            bench_ssh_ready(workdir, args.rounds)
        bench_throughput(workdir, args.requests)
        bench_memory(workdir, args.pods)
    return 0


if __name__ == "__main__":
    sys.exit(main())
