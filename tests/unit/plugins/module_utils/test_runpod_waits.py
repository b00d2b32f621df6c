# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Long waits on an injected clock: every pause is capped, a wait of hours ends in a clean timeout."""

from __future__ import annotations

import pytest

from ansible_collections.trainops.gpu.plugins.module_utils._runpod import (
    MAX_WAIT_TIMEOUT,
    RunPodClient,
    RunPodWaitTimeout,
    backoff_delay,
    check_wait_timeout,
)

TWO_HOURS = 2 * 3600


class FakeTime:
    """A clock that only moves when the client sleeps."""

    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def client_with_pod(pod):
    fake = FakeTime()
    client = RunPodClient(api_key="k", api_url="http://127.0.0.1:1", sleep=fake.sleep, clock=fake.clock)
    client.get_pod = lambda pod_id: dict(pod, id=pod_id)
    return client, fake


def test_two_hour_wait_for_pod_ends_in_a_timeout_naming_the_pod():
    client, fake = client_with_pod({"status": "PROVISIONING"})
    with pytest.raises(RunPodWaitTimeout) as caught:
        client.wait_for_pod("pod_slow", ("RUNNING",), timeout=TWO_HOURS)
    assert "pod pod_slow still PROVISIONING after 7200s" in str(caught.value)
    assert fake.now == pytest.approx(TWO_HOURS)
    # Past the old overflow (attempt ~1024, a simulated 5,103 s): every pause capped at 5 s.
    assert len(fake.sleeps) > 1100 and max(fake.sleeps) == 5.0


def test_two_hour_wait_for_ssh_ends_in_a_timeout_naming_the_pod():
    client, fake = client_with_pod({"status": "STARTING"})
    with pytest.raises(RunPodWaitTimeout) as caught:
        client.wait_for_ssh("pod_slow", timeout=TWO_HOURS)
    assert "pod pod_slow not ready for SSH after 7200s" in str(caught.value)
    assert "status RUNNING (now STARTING)" in str(caught.value)
    assert len(fake.sleeps) > 1100 and max(fake.sleeps) == 5.0


def test_poll_and_retry_backoff_stay_capped_for_any_attempt():
    assert RunPodClient.poll_delay(0) == 0.25 and RunPodClient.poll_delay(3) == 2.0
    for attempt in (20, 1023, 1024, 5000, 10**6):
        assert RunPodClient.poll_delay(attempt) == 5.0
        assert backoff_delay(attempt, 0.5, 30.0, rand=lambda: 1.0) == 30.0
    client = RunPodClient(api_key="k", api_url="http://127.0.0.1:1", rand=lambda: 0.0)
    assert client.backoff(10**6) == 15.0


def test_wait_timeout_is_bounded():
    assert check_wait_timeout(1) == 1.0 and check_wait_timeout(MAX_WAIT_TIMEOUT) == MAX_WAIT_TIMEOUT
    for bad in (0, -5, MAX_WAIT_TIMEOUT + 1, 10**9, "soon", None):
        with pytest.raises(ValueError, match="wait_timeout must be"):
            check_wait_timeout(bad)
    client, fake = client_with_pod({"status": "PROVISIONING"})
    with pytest.raises(ValueError, match="from 1 to 21600 seconds"):
        client.wait_for_pod("p1", ("RUNNING",), timeout=MAX_WAIT_TIMEOUT + 1)
    assert fake.sleeps == []
