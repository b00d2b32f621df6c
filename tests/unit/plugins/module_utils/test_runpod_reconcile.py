# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""RunPodClient.reconcile, the one loop that settles ambiguous failures, and the two callers on top of it.

No HTTP: send and read_back are scripted callables, and the client's sleep is injected, so every pause
the loop takes is recorded and none is slept.
"""

from __future__ import annotations

import pytest

from ansible_collections.trainops.gpu.plugins.module_utils._runpod import (
    RunPodClient,
    RunPodError,
    RunPodUnreconciled,
)
from ansible_collections.trainops.gpu.plugins.module_utils._run_state import ResourceRecorder
from ansible_collections.trainops.gpu.plugins.module_utils._runpod_base import RECHECK_DELAY_S, RunPodModule
from ansible_collections.trainops.gpu.plugins.modules.runpod_pod import RunPodPod

# At rand=0.5, retry n waits 0.75 * 0.5 * 2**n.
BACKOFF = [0.375, 0.75, 1.5]


def client(sleeps, max_retries=3):
    return RunPodClient(
        api_key="k", api_url="http://127.0.0.1:9", sleep=sleeps.append, rand=lambda: 0.5, max_retries=max_retries
    )


def error(status):
    return RunPodError("createPod", "POST", "/v2/pods", status, title="t")


def scripted(*outcomes):
    """A callable returning (or raising) the outcomes in turn; ``calls`` counts the calls."""
    queue = list(outcomes)

    def call():
        call.calls += 1
        outcome = queue.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    call.calls = 0
    return call


def test_a_request_that_succeeds_is_returned_without_reading_back():
    sleeps = []
    send, read_back = scripted({"id": "p1"}), scripted()
    assert client(sleeps).reconcile(send, read_back, bool) == ({"id": "p1"}, None)
    assert (send.calls, read_back.calls, sleeps) == (1, 0, [])


def test_a_clear_refusal_is_raised_as_it_is():
    refusal = error(422)
    send, read_back = scripted(refusal), scripted()
    with pytest.raises(RunPodError) as caught:
        client([]).reconcile(send, read_back, bool)
    assert caught.value is refusal and read_back.calls == 0


def test_an_ambiguous_failure_that_took_effect_returns_the_state_read_back():
    sleeps = []
    failure = error(500)
    send, read_back = scripted(failure), scripted([{"id": "p1"}])
    assert client(sleeps).reconcile(send, read_back, bool) == ([{"id": "p1"}], failure)
    assert (send.calls, read_back.calls, sleeps) == (1, 1, [])


def test_recheck_reads_again_a_moment_later_before_judging():
    sleeps = []
    send, read_back = scripted(error(None)), scripted([], [{"id": "p1"}])
    found, failure = client(sleeps).reconcile(send, read_back, bool, recheck_s=1.0)
    assert found == [{"id": "p1"}] and failure.status is None
    assert (send.calls, read_back.calls, sleeps) == (1, 2, [1.0])


def test_what_did_not_happen_is_sent_again_after_the_client_backoff():
    sleeps = []
    send, read_back = scripted(error(503), error(None), {"id": "p2"}), scripted([], [], [], [])
    assert client(sleeps).reconcile(send, read_back, bool, recheck_s=1.0) == ({"id": "p2"}, None)
    assert send.calls == 3 and read_back.calls == 4
    assert sleeps == [1.0, BACKOFF[0], 1.0, BACKOFF[1]]


def test_retries_are_bounded_by_max_retries():
    sleeps = []
    failures = [error(503), error(503), error(503)]
    send, read_back = scripted(*failures), scripted(None, None, None)
    with pytest.raises(RunPodUnreconciled) as caught:
        client(sleeps, max_retries=2).reconcile(send, read_back, lambda pod: pod is not None)
    assert caught.value.failure is failures[-1] and caught.value.state is None and caught.value.read_error is None
    assert send.calls == 3 and sleeps == BACKOFF[:2]


def test_a_read_back_status_is_judged_but_never_resent():
    sleeps = []
    stopped, refused = {"status": "EXITED"}, error(409)
    send, read_back = scripted(refused), scripted(stopped)

    def is_stopped(pod):
        return pod["status"] == "EXITED"

    assert client(sleeps).reconcile(send, read_back, is_stopped, read_back_on=(409,)) == (stopped, refused)
    running = {"status": "RUNNING"}
    send, read_back = scripted(error(409)), scripted(running)
    with pytest.raises(RunPodUnreconciled) as caught:
        client(sleeps).reconcile(send, read_back, is_stopped, read_back_on=(409,))
    assert caught.value.failure.status == 409 and caught.value.state is running
    assert send.calls == 1 and sleeps == []


def test_a_failed_read_back_is_reported_with_the_failure_it_was_settling():
    failure, lookup = error(500), RunPodError("listPods", "GET", "/v2/pods", 503)
    send, read_back = scripted(failure), scripted(lookup)
    with pytest.raises(RunPodUnreconciled) as caught:
        client([]).reconcile(send, read_back, bool)
    assert caught.value.failure is failure and caught.value.read_error is lookup and caught.value.state is None


# -- the callers: create_reconciled (every create) and runpod_pod's actions -------------------------------


class Failed(Exception):
    pass


class FakeModule:
    def __init__(self, **params):
        self.params = dict({"api_retries": 2}, **params)
        self.warnings = []

    def warn(self, text):
        self.warnings.append(text)

    def fail_json(self, **result):
        raise Failed(result)


def module_with(cls, sleeps, **params):
    """A module object whose client sleeps into ``sleeps``; nothing else of __init__ is needed here."""
    runner = cls.__new__(cls)
    runner.module = FakeModule(**params)
    runner.params = runner.module.params
    runner.result = {"changed": False}
    runner.client = client(sleeps, max_retries=runner.module.params["api_retries"])
    if cls is RunPodPod:
        # No record_to among the params: the pod module's state.json recorder is there, and disabled.
        runner.recorder = ResourceRecorder(runner.params, "pod", False)
        runner.record_failed = False
    return runner


def test_create_adopts_what_an_ambiguous_create_made():
    sleeps = []
    runner = module_with(RunPodModule, sleeps)
    send, find = scripted(error(500)), scripted([], [{"id": "p1", "name": "n"}])
    assert runner.create_reconciled("pod", "n", send, find, "pod_ids") == ({"id": "p1", "name": "n"}, True)
    assert sleeps == [RECHECK_DELAY_S] and "adopted p1" in runner.module.warnings[0]


def test_create_fails_listing_duplicates():
    runner = module_with(RunPodModule, [])
    send, find = scripted(error(500)), scripted([{"id": "b"}, {"id": "a"}])
    with pytest.raises(Failed) as caught:
        runner.create_reconciled("pod", "n", send, find, "pod_ids")
    assert caught.value.args[0]["pod_ids"] == ["a", "b"] and "2 pods are named 'n'" in caught.value.args[0]["msg"]


def test_create_gives_up_after_api_retries_and_says_nothing_was_left():
    sleeps = []
    runner = module_with(RunPodModule, sleeps, api_retries=1)
    send, find = scripted(error(503), error(503)), scripted([], [], [], [])
    with pytest.raises(Failed) as caught:
        runner.create_reconciled("pod", "n", send, find, "pod_ids")
    assert "none of that name exists; nothing was left" in caught.value.args[0]["msg"]
    assert send.calls == 2 and sleeps == [RECHECK_DELAY_S, BACKOFF[0], RECHECK_DELAY_S]


def test_create_whose_lookup_fails_too_says_it_may_exist():
    runner = module_with(RunPodModule, [])
    send, find = scripted(error(500)), scripted(RunPodError("listPods", "GET", "/v2/pods", 503))
    with pytest.raises(Failed) as caught:
        runner.create_reconciled("pod", "n", send, find, "pod_ids")
    assert "looking it up failed too, so it may exist" in caught.value.args[0]["msg"]


class ActionClient:
    """Just the calls RunPodPod.act makes, answering from scripts, with reconcile from a real client."""

    def __init__(self, sleeps, actions, reads):
        self._real = client(sleeps, max_retries=2)
        self.pod_action = lambda pod_id, action: actions()
        self.get_pod = lambda pod_id: reads()
        self.reconcile = self._real.reconcile


def test_action_that_failed_ambiguously_but_happened_returns_the_pod():
    sleeps = []
    runner = module_with(RunPodPod, sleeps)
    runner.client = ActionClient(sleeps, scripted(error(502)), scripted({"id": "p", "status": "EXITED"}))
    assert runner.act({"id": "p", "status": "RUNNING"}, "stop") == {"id": "p", "status": "EXITED"}
    assert sleeps == []


def test_action_refused_409_names_the_allowed_actions_and_is_not_resent():
    sleeps = []
    runner = module_with(RunPodPod, sleeps)
    actions = scripted(RunPodError("podAction", "POST", "/v2/pods/p/action", 409, title="Conflict"))
    runner.client = ActionClient(sleeps, actions, scripted({"id": "p", "status": "RUNNING", "actions": ["stop"]}))
    with pytest.raises(Failed) as caught:
        runner.act({"id": "p", "status": "EXITED"}, "restart")
    assert "cannot restart pod p in status RUNNING (allowed now: stop)" in caught.value.args[0]["msg"]
    assert actions.calls == 1 and sleeps == []


def test_action_whose_read_back_fails_raises_that_read_error():
    runner = module_with(RunPodPod, [])
    lookup = RunPodError("getPod", "GET", "/v2/pods/p", 503)
    runner.client = ActionClient([], scripted(error(None)), scripted(lookup))
    with pytest.raises(RunPodError) as caught:
        runner.act({"id": "p", "status": "RUNNING"}, "stop")
    assert caught.value is lookup
