"""The command line contract: port, emulator.json, key sources, loopback only, clean stop."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time

from emulator_helpers import EMULATOR_DIR


def serve(tmp_path, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "runpod_emulator", "serve", "--state-dir", str(tmp_path / "emu"), *args]
    env = {k: v for k, v in os.environ.items() if k != "RUNPOD_EMULATOR_API_KEY"}
    env["PYTHONPATH"] = str(EMULATOR_DIR)
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_fixed_port_info_file_key_file_and_sigterm(tmp_path):
    port = free_port()
    key_file = tmp_path / "key"
    key_file.write_text("file-key\n")
    process = serve(tmp_path, "--backend", "memory", "--port", str(port), "--api-key-file", str(key_file))
    try:
        info_path = tmp_path / "emu" / "emulator.json"
        deadline = time.monotonic() + 20
        while not info_path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        info = json.loads(info_path.read_text())
        assert info["port"] == port and info["pid"] == process.pid and info["backend"] == "memory"
        assert info["api_url"] == f"http://127.0.0.1:{port}/v2"
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        for method, expected in (("GET", 200), ("HEAD", 405), ("OPTIONS", 405)):
            connection.request(method, "/v2/pods", headers={"Authorization": "Bearer file-key"})
            response = connection.getresponse()
            response.read()
            assert response.status == expected, method
        connection.close()
        process.terminate()
        assert process.wait(timeout=15) == 0
        assert not info_path.exists()
        output = process.stdout.read() if process.stdout else ""
        assert f"listening on http://127.0.0.1:{port}" in output and "file-key" not in output
    finally:
        process.kill()
        process.wait(timeout=10)


def test_refuses_missing_key_and_non_loopback_host(tmp_path):
    no_key = serve(tmp_path, "--backend", "memory")
    output, _err = no_key.communicate(timeout=20)
    assert no_key.returncode != 0 and "no API key" in output
    exposed = serve(tmp_path, "--backend", "memory", "--host", "0.0.0.0", "--api-key", "k")
    output, _err = exposed.communicate(timeout=20)
    assert exposed.returncode != 0 and "loopback only" in output


def test_make_targets_start_once_record_the_pid_and_stop(tmp_path):
    state = tmp_path / "make-emu"
    make = [
        "make",
        "-s",
        "-C",
        str(EMULATOR_DIR.parent),
        "-o",
        "setup",
        "EMULATOR_BACKEND=memory",
        f"EMULATOR_STATE={state}",
    ]
    env = {k: v for k, v in os.environ.items() if k != "EMULATOR_API_KEY"}

    def run(target: str) -> str:
        result = subprocess.run([*make, target], capture_output=True, text=True, env=env, timeout=60, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    try:
        assert "emulator: http://127.0.0.1:" in run("emulator-start")
        pid = int((state / "emulator.pid").read_text())
        assert f"already running (pid {pid})" in run("emulator-start")
        info = json.loads((state / "emulator.json").read_text())
        assert info["pid"] == pid and json.loads(run("emulator-status")) == info
        key = (state / "api-key").read_text().strip()
        assert (state / "api-key").stat().st_mode & 0o077 == 0
        connection = http.client.HTTPConnection("127.0.0.1", info["port"], timeout=10)
        connection.request("GET", "/v2/pods", headers={"Authorization": f"Bearer {key}"})
        assert connection.getresponse().status == 200
        connection.close()
        assert f"stopped (pid {pid})" in run("emulator-stop")
        assert not (state / "emulator.pid").exists()
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{pid}")
    finally:
        run("emulator-stop")
