# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A pod that will never get ssh.direct (no public IP, no 22/tcp): the SSH wait tells so within a short grace."""

from __future__ import annotations

import pytest

from ansible_collections.trainops.gpu.plugins.module_utils._runpod import (
    NO_SSH_GRACE_POLL_S,
    NO_SSH_GRACE_POLLS,
    RunPodClient,
    RunPodSshUnreachable,
    RunPodWaitTimeout,
    ssh_never_direct,
)

DIRECT = {"host": "127.0.0.7", "port": 40123, "username": "root", "command": "ssh root@127.0.0.7 -p 40123"}
PROXY = {"host": "ssh.runpod.io", "port": 22, "username": "p1-64411eb2", "command": "ssh p1-64411eb2@ssh.runpod.io"}


def pod(status="RUNNING", ports=("22/tcp",), runtime_ports=None, direct=None, proxy="proxy", cloud="COMMUNITY"):
    proxy = dict(PROXY) if proxy == "proxy" else proxy
    runtime = None if runtime_ports is None else {"uptime": 3, "ports": runtime_ports}
    return {"id": "p1", "status": status, "cloud": cloud, "dataCenterId": "EU-SE-1", "ports": list(ports),
            "ssh": {"proxy": proxy, "direct": direct}, "runtime": runtime}  # fmt: skip


NO_PUBLIC = [{"private": 22, "public": None, "type": "tcp", "ip": None}]
PUBLIC = [{"private": 22, "public": 40123, "type": "tcp", "ip": "127.0.0.7"}]


def test_a_running_pod_with_22_mapped_to_no_public_port_never_gets_direct():
    cause, message = ssh_never_direct(pod(runtime_ports=NO_PUBLIC))
    assert cause == "no_public_ip"
    assert message.startswith("pod p1 runs on a host without a public IP (COMMUNITY cloud, data center EU-SE-1)")
    assert "Create it in the SECURE cloud (cloud: SECURE), or in another data center" in message
    # A public port without an IP is no public mapping either.
    half = [{"private": 22, "public": 40123, "type": "tcp", "ip": None}]
    assert ssh_never_direct(pod(runtime_ports=half))[0] == "no_public_ip"


def test_ports_without_22_never_get_direct():
    cause, message = ssh_never_direct(pod(ports=["8888/http"], runtime_ports=None, status="PROVISIONING"))
    assert cause == "no_ssh_port" and "add 22/tcp to ports" in message and "(8888/http)" in message
    other = [{"private": 8888, "public": None, "type": "http", "ip": None}]
    cause, message = ssh_never_direct(pod(runtime_ports=other))
    assert cause == "no_ssh_port" and "runtime.ports has no 22/tcp mapping" in message


@pytest.mark.parametrize(
    "case",
    [
        pod(runtime_ports=PUBLIC),  # the endpoint is on its way
        pod(runtime_ports=NO_PUBLIC, direct=DIRECT),  # direct is there: nothing to tell
        pod(status="STARTING", runtime_ports=None),  # no machine yet
        pod(status="RUNNING", runtime_ports=None),  # runtime not shown yet
        pod(status="RUNNING", runtime_ports=[]),  # no mapping shown yet
        pod(status="EXITED", runtime_ports=None),  # stopped: direct is null, and comes back at the next start
        {"id": "p1", "status": "RUNNING"},  # a pod without ports or runtime shown
        None,
    ],
)
def test_nothing_is_told_while_direct_may_still_come(case):
    assert ssh_never_direct(case) is None


class FakeTime:
    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def client_reading(pods):
    """A client whose GET of the pod returns each of `pods` in turn, then the last one for ever."""
    fake = FakeTime()
    client = RunPodClient(api_key="k", api_url="http://127.0.0.1:1", sleep=fake.sleep, clock=fake.clock)
    reads = []

    def get_pod(pod_id):
        reads.append(pod_id)
        return pods[min(len(reads), len(pods)) - 1]

    client.get_pod = get_pod
    return client, fake, reads


def test_the_wait_fails_after_the_grace_polls_not_at_the_timeout():
    starting = pod(status="STARTING", runtime_ports=None, proxy=None)
    client, fake, reads = client_reading([starting, starting, pod(runtime_ports=NO_PUBLIC)])
    with pytest.raises(RunPodSshUnreachable) as caught:
        client.wait_for_ssh("p1", timeout=600, probe=False)
    assert caught.value.cause == "no_public_ip" and caught.value.resource["id"] == "p1"
    assert "runs on a host without a public IP" in str(caught.value)
    # Two reads while starting, the first sight and NO_SSH_GRACE_POLLS more, each at least a second apart.
    assert len(reads) == 2 + 1 + NO_SSH_GRACE_POLLS
    grace = fake.sleeps[2:]
    assert len(grace) == NO_SSH_GRACE_POLLS and min(grace) >= NO_SSH_GRACE_POLL_S
    assert fake.now == pytest.approx(0.25 + 0.5 + 1.0 + 2.0)  # the usual poll pauses, the timeout is 600 s


def test_a_mapping_that_appears_within_the_grace_is_waited_for():
    flicker = [pod(runtime_ports=NO_PUBLIC), pod(runtime_ports=NO_PUBLIC), pod(runtime_ports=PUBLIC)]
    ready = pod(runtime_ports=PUBLIC, direct=DIRECT, cloud="SECURE")
    client, _fake, reads = client_reading([*flicker, ready])
    assert client.wait_for_ssh("p1", timeout=600, probe=False)["ssh"]["direct"] == DIRECT
    assert len(reads) == 4
    # Seen again after a normal poll in between: the grace starts over.
    client, _fake, reads = client_reading([*flicker, *flicker, ready])
    assert client.wait_for_ssh("p1", timeout=600, probe=False)["ssh"]["direct"] == DIRECT


def test_a_timeout_within_the_grace_names_the_cause():
    client, _fake, _reads = client_reading([pod(runtime_ports=NO_PUBLIC)])
    with pytest.raises(RunPodWaitTimeout) as caught:
        client.wait_for_ssh("p1", timeout=1, probe=False)
    waiting = "not ready for SSH after 1s: still waiting for an ssh.direct endpoint, which never comes: "
    assert waiting + "pod p1 runs on a host without a public IP" in str(caught.value)


def test_a_pod_without_22_in_its_ports_fails_the_wait_too():
    client, fake, _reads = client_reading([pod(ports=["8888/http"], runtime_ports=None, status="STARTING")])
    with pytest.raises(RunPodSshUnreachable) as caught:
        client.wait_for_ssh("p1", timeout=600)
    assert caught.value.cause == "no_ssh_port" and "add 22/tcp to ports" in str(caught.value)
    assert fake.now == pytest.approx(NO_SSH_GRACE_POLLS * NO_SSH_GRACE_POLL_S)
