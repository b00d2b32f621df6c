"""The bootstrap scenario's verifier: the environment file, the caches and the shell hooks on both pods."""

from __future__ import annotations

import os
import shlex

import pytest
import testinfra

PODS = {
    "trainops-molecule-bootstrap-gpu": {"RUNPOD_POD_ID": "molbootgpu01", "RUNPOD_GPU_COUNT": "2"},
    "trainops-molecule-bootstrap-nogpu": {"RUNPOD_POD_ID": "molbootnogpu1", "RUNPOD_GPU_COUNT": "1"},
}
ENV_FILE = "/etc/trainops/env.sh"
SECRETS = ("molecule-fake-api-key-do-not-leak", "molecule-fake-hf-token-do-not-leak", "molecule-fake-hf-token2")
NOTE = """it's "quoted" $HOME `x`"""


@pytest.fixture(scope="module", params=sorted(PODS))
def pod(request):
    os.environ.setdefault(
        "CONTAINERS_CONF", os.environ.get("MOLECULE_PROJECT_DIRECTORY", "") + "/config/containers.conf"
    )
    host = testinfra.get_host(f"podman://{request.param}")
    host.name = request.param
    return host


# `podman exec` (testinfra's connection) inherits the container's env, secrets included, which an SSH session
# does not: every shell here starts from an empty environment, as sshd gives it.
CLEAN = "env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def sourced(pod, command: str) -> str:
    """command's output in a non-login `sh -c` that sources the file, as jobs do."""
    return pod.check_output(f"{CLEAN} sh -c {shlex.quote(f'. {ENV_FILE} && {command}')}")


def test_env_file_is_root_owned_0644(pod):
    env = pod.file(ENV_FILE)
    assert env.is_file and env.user == "root" and env.mode == 0o644


def test_caches_point_under_the_durable_root(pod):
    assert sourced(pod, 'echo "$PIP_CACHE_DIR|$HF_HOME|$TORCH_HOME|$XDG_CACHE_HOME"') == (
        "/workspace/cache/pip|/workspace/cache/huggingface|/workspace/cache/torch|/workspace/cache"
    )
    for name in ("pip", "huggingface", "torch"):
        assert pod.file(f"/workspace/cache/{name}").is_directory


def test_the_training_hooks_import_from_a_job_with_no_install_of_its_own(pod):
    """The environment file appends the unpacked training package to PYTHONPATH, after the job's own."""
    where = sourced(pod, "python3 -c 'from trainops_train import hooks, sealing; print(hooks.__file__)'")
    assert where.startswith("/workspace/cache/trainops/lib/") and where.endswith("/trainops_train/hooks.py")
    key_dir = where.rsplit("/trainops_train/", 1)[0]
    assert pod.file(f"{key_dir}/COMPLETE").is_file
    paths = sourced(pod, f'PYTHONPATH=/run/own; . {ENV_FILE}; . {ENV_FILE}; printf %s "$PYTHONPATH"')
    assert paths == f"/run/own:{key_dir}"  # sourced twice: the entry is there once, after the job's own
    assert "torch" not in sourced(pod, "python3 -c 'import sys, trainops_train.hooks; print(sorted(sys.modules))'")


def test_a_job_runs_in_the_requirements_venv_which_sees_the_image_torch(pod):
    python = sourced(pod, "command -v python3")
    assert python.startswith("/workspace/cache/venvs/") and python.endswith("/bin/python3"), python
    venv = python.rsplit("/bin/", 1)[0]
    assert pod.file(f"{venv}/.trainops-venv.json").is_file
    assert sourced(pod, 'printf %s "$VIRTUAL_ENV"') == venv
    assert sourced(pod, "python3 -c 'import tinydep, torch; print(tinydep.ANSWER)'") == "42"


def test_pod_variables_from_pid1_are_exported_shell_quoted(pod):
    for name, value in PODS[pod.name].items():
        assert sourced(pod, f'printf %s "${name}"') == value
    assert sourced(pod, 'printf %s "$RUNPOD_DC_ID|$RUNPOD_CPU_COUNT|$RUNPOD_TCP_PORT_22"') == "EU-RO-1|4|22"
    assert sourced(pod, 'printf %s "$RUNPOD_NOTE"') == NOTE


def test_no_secret_reaches_the_file_or_a_session(pod):
    content = pod.file(ENV_FILE).content_string
    for secret in SECRETS:
        assert secret not in content
    assert "RUNPOD_API_KEY" not in content and "PUBLIC_KEY" not in content and "HF_TOKEN" not in content
    assert "molecule-fake" not in sourced(pod, "env")


def test_login_and_interactive_shells_source_it(pod):
    login = pod.check_output(f"{CLEAN} bash -lc 'printf %s \"$RUNPOD_POD_ID\"'")
    assert login == PODS[pod.name]["RUNPOD_POD_ID"]
    interactive = pod.check_output(f"{CLEAN} bash -ic 'printf %s \"$HF_HOME\"' 2>/dev/null")
    assert interactive == "/workspace/cache/huggingface"
    assert pod.check_output(f"{CLEAN} sh -c 'printf %s \"$RUNPOD_POD_ID\"'") == ""


def test_no_probe_file_is_left(pod):
    assert pod.check_output("find /workspace -maxdepth 1 -name '.trainops-probe-*'") == ""


def test_gpu_pod_volume_and_shim(pod):
    if pod.name.endswith("-nogpu"):
        assert not pod.exists("nvidia-smi")
        return
    assert pod.check_output("findmnt -n -o TARGET /workspace") == "/workspace"
    assert pod.check_output("nvidia-smi --query-gpu=count --format=csv,noheader").splitlines() == ["2", "2"]
