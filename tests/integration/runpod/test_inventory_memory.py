"""The trainops.gpu.runpod inventory against the emulator's memory backend, through real ansible-inventory runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

from runpod_integration_helpers import BIN, ROOT, EmulatorProcess, ansible_env, recorded, run_inventory

SECRET = "hf_inventory_secret_value"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIInventoryTestKeyInventoryTestKey00001 inv@test"


def make_pod(emulator, name, data_center="EU-RO-1", ports=("22/tcp",), env=None):
    body = {
        "name": name,
        "image": "localhost/trainops-pod",
        "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1},
        "dataCenterIds": [data_center],
        "ports": list(ports),
        "startSsh": True,
        **({"env": env} if env else {}),
    }
    status, _headers, pod = emulator.api("POST", "/v2/pods", body)
    assert status == 201, pod
    return pod


def write_config(path: Path, cache_dir: Path, **options: str) -> Path:
    lines = [
        "plugin: trainops.gpu.runpod",
        "api_url: \"{{ lookup('ansible.builtin.env', 'TEST_EMULATOR_URL') }}\"",
        "api_key: \"{{ lookup('ansible.builtin.env', 'TEST_EMULATOR_KEY') }}\"",
        "cache: true",
        "cache_plugin: ansible.builtin.jsonfile",
        f"cache_connection: {cache_dir}",
        "cache_timeout: 600",
        "keyed_groups:",
        "  - key: runpod_cloud",
        "    prefix: cloud",
    ]
    lines += [f"{key}: {value}" for key, value in options.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_hosts_groups_vars_filters_and_cache(emulator, tmp_path):
    assert emulator.api("PUT", "/v2/account/ssh-keys", {"keys": [KEY]})[0] == 200
    trainer = make_pod(emulator, "trainops-r7-trainer", env={"HF_TOKEN": SECRET})
    make_pod(emulator, "trainops-r7-eval", data_center="EU-SE-1")
    make_pod(emulator, "jupyter-notebook")
    # Foreign, but shaped like ours: it must not join a run or role group.
    other = make_pod(emulator, "other-r1-trainer")
    workers = [make_pod(emulator, "trainops-r7-worker"), make_pod(emulator, "trainops-r7-worker")]
    noport = make_pod(emulator, "trainops-r9-noport", ports=())
    stopped = make_pod(emulator, "trainops-r8-trainer")
    for pod in (trainer, stopped, other, *workers):
        emulator.wait_for(pod["id"], lambda p: p["ssh"]["direct"] is not None, 30)
    emulator.wait_for(noport["id"], lambda p: p["status"] == "RUNNING", 30)
    assert emulator.api("POST", f"/v2/pods/{stopped['id']}/action", {"action": "stop"})[0] == 200
    emulator.wait_for(stopped["id"], lambda p: p["status"] == "EXITED", 30)
    trainer = emulator.api("GET", f"/v2/pods/{trainer['id']}")[2]

    env = {"TEST_EMULATOR_URL": emulator.url, "TEST_EMULATOR_KEY": emulator.api_key, "RUNPOD_API_KEY": ""}
    config = write_config(tmp_path / "all.runpod.yml", tmp_path / "cache")
    emulator.admin("DELETE", "/_emulator/requests")
    inventory, output = run_inventory(emulator, config, "-vvv", **env)
    assert emulator.api_key not in output

    hostvars = inventory["_meta"]["hostvars"]
    worker_hosts = sorted(f"trainops-r7-worker_{w['id']}" for w in workers)
    assert sorted(hostvars) == sorted(
        ["jupyter-notebook", "other-r1-trainer", "trainops-r7-eval", "trainops-r7-trainer", *worker_hosts]
    )
    assert f"skipping pod {noport['id']} (trainops-r9-noport, RUNNING): no direct SSH endpoint" in output
    host = hostvars["trainops-r7-trainer"]
    assert (host["ansible_host"], host["ansible_port"], host["ansible_user"]) == (
        "127.0.0.1",
        trainer["ssh"]["direct"]["port"],
        "root",
    )
    assert host["runpod_id"] == trainer["id"] and host["runpod_run_id"] == "r7" and host["runpod_role"] == "trainer"
    assert not any(key in host for key in ("id", "name", "status", "env"))
    assert sorted(inventory["runpod_run_r7"]["hosts"]) == sorted(
        ["trainops-r7-eval", "trainops-r7-trainer", *worker_hosts]
    )
    assert sorted(inventory["runpod_role_trainer"]["hosts"]) == ["trainops-r7-trainer"]
    assert not any(g.startswith("runpod_run_") and g != "runpod_run_r7" for g in inventory)
    assert (hostvars["other-r1-trainer"]["runpod_run_id"], hostvars["other-r1-trainer"]["runpod_role"]) == (None, None)
    assert "runpod" in inventory and "other-r1-trainer" in inventory["runpod"]["hosts"]
    assert "trainops-r7-eval" in inventory["runpod_dc_eu_se_1"]["hosts"]
    assert len(inventory["runpod_status_running"]["hosts"]) == 6
    assert len(inventory["runpod_gpu_nvidia_geforce_rtx_4090"]["hosts"]) == 6
    assert len(inventory["cloud_SECURE"]["hosts"]) == 6
    assert [(r["method"], r["path"]) for r in recorded(emulator)] == [("GET", "/v2/pods")]

    # Served from the cache: the same inventory, no API call at all.
    emulator.admin("DELETE", "/_emulator/requests")
    cached, _output = run_inventory(emulator, config, **env)
    assert cached == inventory
    assert recorded(emulator) == []
    assert host["runpod_env_keys"] == ["HF_TOKEN"]
    cache_files = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert cache_files and not any(SECRET in p.read_text() for p in cache_files)
    # --flush-cache reads the API again.
    run_inventory(emulator, config, "--flush-cache", **env)
    assert len(recorded(emulator)) == 1

    only_r7 = write_config(tmp_path / "r7.runpod.yml", tmp_path / "cache-r7", name_prefix="trainops-r7-")
    inventory, _output = run_inventory(emulator, only_r7, **env)
    assert len(inventory["_meta"]["hostvars"]) == 4
    only_ours = write_config(tmp_path / "ours.runpod.yml", tmp_path / "cache-ours", name_prefix="trainops-")
    inventory, _output = run_inventory(emulator, only_ours, **env)
    assert "other-r1-trainer" not in inventory["_meta"]["hostvars"]
    assert "jupyter-notebook" not in inventory["_meta"]["hostvars"]

    exited = write_config(tmp_path / "exited.runpod.yml", tmp_path / "cache-exited", statuses="[EXITED]")
    inventory, output = run_inventory(emulator, exited, "-v", **env)
    assert inventory["_meta"]["hostvars"] == {}
    assert f"skipping pod {stopped['id']} (trainops-r8-trainer, EXITED)" in output


def test_local_inventory_reads_the_emulator_state_file(emulator):
    assert emulator.api("PUT", "/v2/account/ssh-keys", {"keys": [KEY]})[0] == 200
    pod = make_pod(emulator, "trainops-local-trainer")
    pod = emulator.wait_for(pod["id"], lambda p: p["ssh"]["direct"] is not None, 30)
    env = {
        "RUNPOD_API_URL": "",
        "RUNPOD_API_KEY": "",
        "RUNPOD_EMULATOR_STATE_DIR": str(emulator.state_dir),
        "RUNPOD_EMULATOR_API_KEY": emulator.api_key,
    }
    inventory, _output = run_inventory(emulator, ROOT / "inventories" / "local.runpod.yml", **env)
    host = inventory["_meta"]["hostvars"]["trainops-local-trainer"]
    assert host["ansible_port"] == pod["ssh"]["direct"]["port"]


def ready_pods(emulator, *names):
    pods = [make_pod(emulator, name) for name in names]
    return [emulator.wait_for(p["id"], lambda p: p["ssh"]["direct"] is not None, 30) for p in pods]


def inventory_command(config: Path, emulator: EmulatorProcess, env: dict) -> subprocess.CompletedProcess:
    command = [str(BIN / "ansible-inventory"), "-i", str(config), "--list"]
    return subprocess.run(
        command, cwd=ROOT, env=ansible_env(emulator, **env), capture_output=True, text=True, timeout=120, check=False
    )


def test_pods_named_like_reserved_hosts_or_groups_get_a_safe_name(emulator, tmp_path):
    assert emulator.api("PUT", "/v2/account/ssh-keys", {"keys": [KEY]})[0] == 200
    names = ("localhost", "all", "runpod", "runpod_status_running", "ungrouped", "127.0.0.1", "trainops-r3-trainer")
    pods = {p["name"]: p for p in ready_pods(emulator, *names)}
    env = {"TEST_EMULATOR_URL": emulator.url, "TEST_EMULATOR_KEY": emulator.api_key}
    config = write_config(tmp_path / "reserved.runpod.yml", tmp_path / "cache")
    inventory, output = run_inventory(emulator, config, "-v", **env)
    hostvars = inventory["_meta"]["hostvars"]
    renamed = {name: f"{name}_{pods[name]['id']}" for name in names if name != "trainops-r3-trainer"}
    assert sorted(hostvars) == sorted([*renamed.values(), "trainops-r3-trainer"])
    for name, host in renamed.items():
        assert hostvars[host]["runpod_name"] == name
        assert hostvars[host]["ansible_port"] == pods[name]["ssh"]["direct"]["port"]
        assert f"pod {pods[name]['id']} is named '{name}', a name Ansible or this plugin reserves" in output
    assert sorted(inventory["runpod"]["hosts"]) == sorted(hostvars)

    # A "hosts: localhost" play stays on the control node (implicit localhost, local connection), not the pod.
    command = [str(BIN / "ansible"), "-i", str(config), "localhost", "-m", "debug", "-a", "var=ansible_connection"]
    done = subprocess.run(
        command, cwd=ROOT, env=ansible_env(emulator, **env), capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and '"ansible_connection": "local"' in done.stdout, done.stdout + done.stderr


def test_cache_is_per_url_and_key_and_a_wrong_key_fails(emulator, tmp_path):
    assert emulator.api("PUT", "/v2/account/ssh-keys", {"keys": [KEY]})[0] == 200
    (gone,) = ready_pods(emulator, "trainops-r5-trainer")
    env = {"TEST_EMULATOR_URL": emulator.url, "TEST_EMULATOR_KEY": emulator.api_key}
    config = write_config(tmp_path / "cached.runpod.yml", tmp_path / "cache")
    inventory, _output = run_inventory(emulator, config, **env)
    assert list(inventory["_meta"]["hostvars"]) == ["trainops-r5-trainer"]
    assert emulator.api("DELETE", f"/v2/pods/{gone['id']}")[0] == 204
    cache_text = "".join(p.read_text() for p in (tmp_path / "cache").rglob("*") if p.is_file())
    assert emulator.api_key not in cache_text

    # Another emulator (another URL, another key), same configuration and cache: its own pods, one API call.
    with EmulatorProcess(backend="memory", state_dir=tmp_path / "other-emulator") as other:
        assert other.api("PUT", "/v2/account/ssh-keys", {"keys": [KEY]})[0] == 200
        (mine,) = ready_pods(other, "trainops-r6-eval")
        other.admin("DELETE", "/_emulator/requests")
        other_env = {"TEST_EMULATOR_URL": other.url, "TEST_EMULATOR_KEY": other.api_key}
        inventory, _output = run_inventory(other, config, **other_env)
        assert list(inventory["_meta"]["hostvars"]) == ["trainops-r6-eval"]
        assert inventory["_meta"]["hostvars"]["trainops-r6-eval"]["runpod_id"] == mine["id"]
        assert [(r["method"], r["path"]) for r in recorded(other)] == [("GET", "/v2/pods")]

    # The first account's entry is still served from the cache (the terminated pod too, until --flush-cache).
    emulator.admin("DELETE", "/_emulator/requests")
    inventory, _output = run_inventory(emulator, config, **env)
    assert list(inventory["_meta"]["hostvars"]) == ["trainops-r5-trainer"] and recorded(emulator) == []

    # A wrong key is never served from the cache: one request, a 401, and ansible-inventory fails.
    done = inventory_command(config, emulator, {**env, "TEST_EMULATOR_KEY": "wrong-key"})
    assert done.returncode != 0, done.stdout + done.stderr
    assert "401" in done.stderr and "wrong-key" not in done.stdout + done.stderr
    assert [(r["method"], r["path"], r["status"]) for r in recorded(emulator)] == [("GET", "/v2/pods", 401)]


def test_the_runpod_inventory_file_reads_the_key_from_runpod_api_key(emulator):
    # inventories/runpod.runpod.yml, the RunPod twin of local.runpod.yml: URL from RUNPOD_API_URL (here the
    # emulator's), key from RUNPOD_API_KEY only; without it the inventory fails naming the variable.
    source = ROOT / "inventories" / "runpod.runpod.yml"
    assert emulator.api("PUT", "/v2/account/ssh-keys", {"keys": [KEY]})[0] == 200
    pod = make_pod(emulator, "trainops-rp1-trainer")
    make_pod(emulator, "jupyter-notebook")
    pod = emulator.wait_for(pod["id"], lambda p: p["ssh"]["direct"] is not None, 30)
    inventory, _output = run_inventory(emulator, source)
    host = inventory["_meta"]["hostvars"]["trainops-rp1-trainer"]
    assert (host["ansible_host"], host["ansible_port"]) == (pod["ssh"]["direct"]["host"], pod["ssh"]["direct"]["port"])
    assert "jupyter-notebook" not in inventory["_meta"]["hostvars"]  # name_prefix: trainops-
    env = ansible_env(emulator, RUNPOD_EMULATOR_API_KEY=emulator.api_key)
    del env["RUNPOD_API_KEY"]
    done = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", str(source), "--list"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0 and "RUNPOD_API_KEY" in done.stderr, done.stderr[-2000:]
