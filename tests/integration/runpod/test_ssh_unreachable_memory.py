"""A pod that will never get ssh.direct (a COMMUNITY host without a public IP): runpod_pod's SSH wait fails within
seconds naming the cause, not at wait_timeout, while a pod with a public IP still waits as before."""

from __future__ import annotations

from datetime import datetime

import pytest
from runpod_integration_helpers import live_pods, run_playbook


def task_seconds(run, name: str) -> float:
    for play in run.report["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"] == name:
                duration = task["task"]["duration"]
                return (
                    datetime.fromisoformat(duration["end"]) - datetime.fromisoformat(duration["start"])
                ).total_seconds()
    raise AssertionError(f"no task {name!r}")


@pytest.mark.parametrize("wait_for", ["ssh", "endpoint"])
def test_wait_for_ssh_fails_at_once_on_a_host_without_a_public_ip(emulator, wait_for):
    run = run_playbook(emulator, "no_public_ip.yml", {"wait_for": wait_for})
    assert run.rc == 0, run.explain()
    failing = "Create a COMMUNITY pod on a host without a public IP and wait for SSH"
    community = run.task(failing)
    assert community["failed"] and community["changed"], community
    message = community["msg"]
    pod_id = community["pod_id"]
    assert message.startswith(f"pod {pod_id} runs on a host without a public IP (COMMUNITY cloud, data center EU-SE-1)")
    assert "runtime.ports maps 22/tcp to no public port" in message
    assert "Create it in the SECURE cloud (cloud: SECURE)" in message
    assert f"It was created by this task and is billing; pod id {pod_id}: terminate it with state=absent." in message
    assert community["ssh_unreachable"] == "no_public_ip" and community["pod"]["ssh_port"] is None
    # Two grace polls at least a second apart after the first sight of it, never the 300 s wait_timeout.
    assert 1.5 < task_seconds(run, failing) < 15, task_seconds(run, failing)

    secure = run.task("Create a SECURE pod in the same data center and wait for its endpoint")
    assert secure["pod"]["status"] == "RUNNING" and secure["pod"]["ssh_port"], secure
    # The community pod is left for the caller to terminate, as the message says; nothing else was made.
    assert sorted(p["name"] for p in live_pods(emulator)) == [
        "trainops-nopublicip-secure",
        "trainops-nopublicip-trainer",
    ]
    pod = next(p for p in live_pods(emulator) if p["id"] == pod_id)
    assert pod["ssh"]["direct"] is None and pod["runtime"]["ports"] == [
        {"private": 22, "public": None, "type": "tcp", "ip": None}
    ]
