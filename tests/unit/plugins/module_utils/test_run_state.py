# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""_run_state: the state.json writer. Real files, real processes, real flock; nothing mocked."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import signal
import threading
import time

import pytest

from ansible_collections.trainops.gpu.plugins.module_utils import _run_state as rs
from ansible_collections.trainops.gpu.plugins.modules.runpod_network_volume import RunPodNetworkVolume
from ansible_collections.trainops.gpu.plugins.modules.runpod_pod import RunPodPod

NOW = "2026-12-03T05:00:00Z"
LATER = "2026-12-03T06:00:00Z"


def pod(pod_id, **fields):
    return dict({"kind": "pod", "id": pod_id}, **fields)


@pytest.fixture
def state_file(tmp_path):
    return str(tmp_path / "runs" / "r1" / "state.json")


def read(path):
    with open(path) as handle:
        return json.load(handle)


# --- the pure merge ---------------------------------------------------------------------------------------


def test_new_document_has_the_format_and_the_resource():
    document, changed = rs.merged_document(None, "r1", [pod("p1", name="n", status="RUNNING")], {"api_url": "u"}, NOW)
    assert changed
    assert document == {
        "format_version": 1,
        "run_id": "r1",
        "api_url": "u",
        "started_at": NOW,
        "updated_at": NOW,
        "resources": [
            {"kind": "pod", "id": "p1", "name": "n", "status": "RUNNING", "recorded_at": NOW, "updated_at": NOW}
        ],
    }


def test_upsert_merges_fields_keeps_recorded_at_and_ignores_timestamps_when_nothing_changed():
    first = rs.merged_document(None, "r1", [pod("p1", status="RUNNING", final={"a": 1})], None, NOW)[0]
    same, changed = rs.merged_document(first, "r1", [pod("p1", status="RUNNING")], None, LATER)
    assert not changed and same == first
    second, changed = rs.merged_document(first, "r1", [pod("p1", status="EXITED", final={"b": 2})], None, LATER)
    assert changed
    [record] = second["resources"]
    assert record["status"] == "EXITED" and record["final"] == {"a": 1, "b": 2}
    assert record["recorded_at"] == NOW and record["updated_at"] == LATER and second["updated_at"] == LATER
    assert first["resources"][0]["status"] == "RUNNING"  # the input document is not modified


def test_resources_are_told_apart_by_kind_and_id_and_keep_their_order():
    records = [pod("x"), {"kind": "network_volume", "id": "x"}, pod("y")]
    document = rs.merged_document(None, "r1", records, None, NOW)[0]
    document = rs.merged_document(document, "r1", [pod("x", status="EXITED")], None, NOW)[0]
    assert [(r["kind"], r["id"]) for r in document["resources"]] == [(r["kind"], r["id"]) for r in records]
    assert document["resources"][0]["status"] == "EXITED" and "status" not in document["resources"][1]


def test_created_stays_created():
    document = rs.merged_document(None, "r1", [pod("p1", action="created")], None, NOW)[0]
    document, changed = rs.merged_document(document, "r1", [pod("p1", action="reused")], None, LATER)
    assert not changed and document["resources"][0]["action"] == "created"
    document = rs.merged_document(None, "r1", [pod("p2", action="reused")], None, NOW)[0]
    document, changed = rs.merged_document(document, "r1", [pod("p2", action="created")], None, LATER)
    assert changed and document["resources"][0]["action"] == "created"


def test_run_defaults_fill_only_what_is_missing():
    document = rs.merged_document(None, "r1", (), {"api_url": "a"}, NOW)[0]
    again, changed = rs.merged_document(document, "r1", (), None, LATER, run_defaults={"api_url": "b"})
    assert not changed and again["api_url"] == "a"
    bare = rs.merged_document(None, "r1", (), None, NOW, run_defaults={"api_url": "b"})[0]
    assert bare["api_url"] == "b"


@pytest.mark.parametrize(
    "resource, where",
    [
        (pod("p", api_key="k"), "resources[0].api_key"),
        (pod("p", env={"HF_TOKEN": "x"}), "resources[0].env.HF_TOKEN"),
        (pod("p", final={"Secret": 1}), "resources[0].final.Secret"),
        (pod("p", creds=[{"password": "x"}]), "resources[0].creds[0].password"),
        (pod("p", private_key="x"), "resources[0].private_key"),
    ],
)
def test_secret_looking_keys_are_refused(state_file, resource, where):
    with pytest.raises(rs.RunStateError, match=re.escape(f"look like secrets are never recorded: {where}")):
        rs.record(state_file, "r1", [resource])
    assert not os.path.exists(state_file)


def test_non_secret_keys_that_contain_similar_words_are_kept(state_file):
    fields = {"ssh_key": "path", "public_key": "ssh-ed25519 AAAA", "tokens_per_s": 1.5, "author": "me"}
    document = rs.record(state_file, "r1", [pod("p", **fields)])[0]
    assert document["resources"][0]["tokens_per_s"] == 1.5


@pytest.mark.parametrize(
    "resources, run, message",
    [
        ([{"kind": "pod"}], None, "resources[0] needs id"),
        ([{"id": "x", "kind": ""}], None, "resources[0] needs kind"),
        (["pod"], None, "resources[0] must be a dict"),
        ((), {"resources": []}, "run must not set resources"),
        ((), {"run_id": "other"}, "run must not set run_id"),
        ([pod("p", value=float("nan"))], None, "not JSON"),
    ],
)
def test_bad_records_are_refused_before_writing(state_file, resources, run, message):
    with pytest.raises(rs.RunStateError) as failed:
        rs.record(state_file, "r1", resources, run)
    assert message in str(failed.value)
    assert not os.path.exists(state_file)


@pytest.mark.parametrize("run_id", ["../x", "", "a/b", ".", "-x"])
def test_bad_run_ids_are_refused(state_file, run_id):
    with pytest.raises(rs.RunStateError, match=r"^run_id .* must be 1-128 letters"):
        rs.record(state_file, run_id, [pod("p")])


# --- the file -----------------------------------------------------------------------------------------------


def test_record_writes_and_a_second_identical_record_leaves_the_file_alone(state_file):
    document, changed = rs.record(state_file, "r1", [pod("p1", status="RUNNING")], {"api_url": "u"})
    assert changed and read(state_file) == document
    before = os.stat(state_file)
    time.sleep(0.01)
    again, changed = rs.record(state_file, "r1", [pod("p1", status="RUNNING")], {"api_url": "u"})
    assert not changed and again == document
    after = os.stat(state_file)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert rs.load(state_file) == document
    assert oct(after.st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_check_mode_writes_nothing(state_file):
    document, changed = rs.record(state_file, "r1", [pod("p1")], check_mode=True)
    assert changed and document["resources"][0]["id"] == "p1"
    assert not os.path.exists(os.path.dirname(state_file))


def test_a_file_of_another_run_or_format_or_not_json_is_never_overwritten(state_file):
    rs.record(state_file, "r1", [pod("p1")])
    with pytest.raises(rs.RunStateError, match="belongs to run 'r1', not 'r2'"):
        rs.record(state_file, "r2", [pod("p2")])
    text = '{"format_version": 1, "run_id": "r1", "resources": [{"kind": "pod", "id": "p1"}'  # cut short
    with open(state_file, "w") as handle:
        handle.write(text)
    with pytest.raises(rs.RunStateError, match="is not valid JSON"):
        rs.record(state_file, "r1", [pod("p2")])
    with open(state_file) as handle:
        assert handle.read() == text
    with open(state_file, "w") as handle:
        json.dump({"format_version": 2, "resources": []}, handle)
    with pytest.raises(rs.RunStateError, match="format_version 2"):
        rs.load(state_file)


def test_preflight_reads_and_checks_without_writing(tmp_path):
    missing = tmp_path / "a" / "b" / "state.json"
    assert rs.preflight(str(missing), "b") is None and not missing.parent.exists()
    with pytest.raises(rs.RunStateError, match="is a directory"):
        rs.preflight(str(tmp_path), "r1")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(rs.RunStateError, match="Not a directory"):
        rs.preflight(str(blocker / "r1" / "state.json"), "r1")
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(str(locked), os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        with pytest.raises(rs.RunStateError, match="not a writable directory"):
            rs.preflight(str(locked / "r1" / "state.json"), "r1")
    finally:
        locked.chmod(0o700)


def test_a_held_lock_is_waited_for_then_reported(state_file):
    rs.record(state_file, "r1", [pod("p1")])
    with rs.StateLock(state_file):
        started = time.monotonic()
        with pytest.raises(rs.RunStateError, match="stayed locked for 0 s by another writer"):
            rs.record(state_file, "r1", [pod("p2")], lock_timeout_s=0.3)
        assert 0.3 <= time.monotonic() - started < 5
    assert [r["id"] for r in rs.load(state_file)["resources"]] == ["p1"]


def _upsert_many(state_file, worker, count, start):
    start.wait()
    for index in range(count):
        rs.record(state_file, "r1", [pod(f"w{worker}-{index}", worker=worker)], {"last": worker})
        rs.record(state_file, "r1", [pod("shared", **{f"seen_by_{worker}": index})])


def test_concurrent_writers_in_separate_processes_lose_nothing(state_file):
    context = multiprocessing.get_context("fork")
    start = context.Event()
    count = 25
    workers = [context.Process(target=_upsert_many, args=(state_file, w, count, start)) for w in range(3)]
    for process in workers:
        process.start()
    start.set()
    for process in workers:
        process.join(60)
        assert process.exitcode == 0
    document = rs.load(state_file, "r1")
    ids = [r["id"] for r in document["resources"]]
    assert sorted(ids) == sorted(["shared"] + [f"w{w}-{i}" for w in range(3) for i in range(count)])
    shared = rs.find_resource(document, "pod", "shared")
    assert all(shared[f"seen_by_{w}"] == count - 1 for w in range(3))


def _rewrite_forever(state_file, stop):
    index = 0
    while not stop.is_set():
        # A large, changing record: a torn write would show as invalid JSON or a short file.
        rs.record(state_file, "r1", [pod("big", blob="x" * 200000, n=index)])
        index += 1


def test_readers_never_see_a_torn_file(state_file):
    rs.record(state_file, "r1", [pod("big", blob="", n=-1)])
    context = multiprocessing.get_context("fork")
    stop = context.Event()
    writer = context.Process(target=_rewrite_forever, args=(state_file, stop))
    writer.start()
    reads = 0
    seen = set()
    deadline = time.monotonic() + 2.0
    try:
        while time.monotonic() < deadline:
            with open(state_file, "rb") as handle:  # no lock: readers need none
                document = json.loads(handle.read())
            seen.add(document["resources"][0]["n"])
            reads += 1
    finally:
        stop.set()
        writer.join(30)
    assert writer.exitcode == 0 and reads > 10 and len(seen) > 2, (reads, len(seen))
    assert not [name for name in os.listdir(os.path.dirname(state_file)) if name.endswith(".tmp")]


def test_a_writer_killed_while_writing_leaves_the_previous_file(state_file):
    rs.record(state_file, "r1", [pod("p1", n=0)])
    context = multiprocessing.get_context("fork")
    stop = context.Event()
    writer = context.Process(target=_rewrite_forever, args=(state_file, stop))
    writer.start()
    time.sleep(0.5)
    os.kill(writer.pid, signal.SIGKILL)
    writer.join(10)
    document = rs.load(state_file, "r1")  # whatever was last renamed into place, whole
    assert {r["id"] for r in document["resources"]} == {"p1", "big"}
    # The lock died with its holder: the next writer gets it at once.
    rs.record(state_file, "r1", [pod("p2")], lock_timeout_s=2)


def test_signals_held_are_delivered_after_the_block():
    received = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: received.append(signum))
    try:
        held = (signal.SIGUSR1,)
        with rs.signals_held(held):
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.05)
            assert received == []
            assert signal.SIGUSR1 in signal.sigpending()
        for _attempt in range(100):
            if received:
                break
            time.sleep(0.01)
        assert received == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, previous)


@pytest.fixture
def sigint_raises_keyboard_interrupt():
    """SIGINT as Python sets it up in a terminal: a run started in the background (`make test &`, CI, cron)
    inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("sigint_raises_keyboard_interrupt")
def test_sigint_inside_the_block_arrives_as_keyboard_interrupt_after_it(state_file):
    with pytest.raises(KeyboardInterrupt), rs.signals_held():
        os.kill(os.getpid(), signal.SIGINT)
        rs.record(state_file, "r1", [pod("p1")])
    assert rs.load(state_file)["resources"][0]["id"] == "p1"


def test_recorder_checks_options_and_writes_with_its_fields(tmp_path):
    path = str(tmp_path / "r9" / "state.json")
    recorder = rs.ResourceRecorder(
        {"record_to": path, "record_fields": {"role": "drill"}, "api_url": "http://u:p@127.0.0.1:1"}, "pod"
    )
    assert recorder.run_id == "r9" and recorder.option_problems() == []
    assert recorder.write("p1", {"status": "RUNNING", "action": "created"})
    record = rs.find_resource(rs.load(path), "pod", "p1")
    assert (
        record["role"] == "drill" and record["status"] == "RUNNING" and rs.load(path)["api_url"] == "http://127.0.0.1:1"
    )
    assert recorder.recorded("p1")["status"] == "RUNNING"
    assert not rs.ResourceRecorder({"record_to": path}, "pod", check_mode=True).write("p2", {})
    assert rs.find_resource(rs.load(path), "pod", "p2") is None
    refused = rs.ResourceRecorder({"record_to": path, "record_fields": {"token": "x", "id": "y"}}, "pod")
    assert refused.option_problems() == ["record_fields must not set id (the module sets them)"]
    secret = rs.ResourceRecorder({"record_to": path, "record_fields": {"token": "x"}}, "pod")
    assert "resources[0].token" in secret.option_problems()[0]
    assert rs.ResourceRecorder({"record_fields": {"role": "x"}}, "pod").option_problems() == [
        "record_fields needs record_to"
    ]


def test_threads_of_one_process_serialise_too(state_file):
    # Each record opens its own descriptor, so flock excludes threads of one process as well.
    errors = []

    def work(worker):
        try:
            for index in range(20):
                rs.record(state_file, "r1", [pod(f"t{worker}-{index}")])
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == [] and len(rs.load(state_file)["resources"]) == 60


# --- ResourceRecording: the record_to side of runpod_pod and runpod_network_volume ----------------------------


class Failed(Exception):
    pass


class FailingModule:
    """The parts of AnsibleModule that ResourceRecording and RunPodModule.fail use; fail_json raises."""

    def __init__(self, params):
        self.params = params
        self.check_mode = False
        self.no_log_values = set()

    def fail_json(self, **result):
        raise Failed(result)


def recording_module(cls, params):
    """A runpod_pod / runpod_network_volume module object with its recorder and nothing of the API."""
    runner = cls.__new__(cls)
    runner.module = FailingModule(params)
    runner.params = params
    runner.result = {"changed": False, cls.record_result_key: {}, "created": False}
    runner.start_recording(runner.module)
    return runner


POD = {"id": "p1", "name": "trainer", "status": "RUNNING", "image": "img"}
VOLUME = {"id": "v1", "name": "ckpt", "data_center": "EU-RO-1", "size": 10}


@pytest.mark.parametrize(
    ("cls", "summary", "named", "remedy", "extra"),
    [
        (RunPodPod, POD, "pod p1 (trainer, RUNNING)", "terminate it", {"pod": POD, "pod_id": "p1"}),
        (RunPodNetworkVolume, VOLUME, "network volume v1 (ckpt)", "delete it", {"network_volume": VOLUME}),
    ],
)
def test_a_resource_that_cannot_be_recorded_fails_naming_it(tmp_path, cls, summary, named, remedy, extra):
    path = tmp_path / "r1" / "state.json"
    path.mkdir(parents=True)  # a directory: reading it fails
    runner = recording_module(cls, {"record_to": str(path)})
    with pytest.raises(Failed) as caught:
        runner.record(summary, "created")
    failed = caught.value.args[0]
    assert failed["msg"].startswith(f"{named} could not be recorded in {path}: cannot read {path}")
    assert failed["msg"].endswith(f". Record it by hand or {remedy}.")
    assert {k: failed.get(k) for k in extra} == extra and ("pod_id" in failed) == ("pod_id" in extra)
    assert runner.record_failed


def test_a_failure_records_what_the_task_created_first(tmp_path):
    path = str(tmp_path / "r1" / "state.json")
    for cls, summary in ((RunPodPod, POD), (RunPodNetworkVolume, VOLUME)):
        runner = recording_module(cls, {"record_to": path, "record_fields": {"role": "drill"}})
        runner.result.update({cls.record_result_key: summary, "created": True})
        with pytest.raises(Failed) as caught:
            runner.fail("the wait ran out")
        assert caught.value.args[0]["msg"] == "the wait ran out"
    pod_record = rs.find_resource(rs.load(path), "pod", "p1")
    volume_record = rs.find_resource(rs.load(path), "network_volume", "v1")
    assert [pod_record[k] for k in ("action", "status", "name", "role")] == ["created", "RUNNING", "trainer", "drill"]
    assert [volume_record[k] for k in ("action", "status", "data_center_id")] == ["created", "available", "EU-RO-1"]


def test_only_the_resources_a_create_made_are_recorded_as_found(tmp_path):
    path = str(tmp_path / "r1" / "state.json")
    runner = recording_module(RunPodPod, {"record_to": path})
    found = [{"id": "mine", "env": {"T": "1"}}, {"id": "theirs", "env": {}}]
    assert runner.record_found(found, lambda pod: pod["env"].get("T") == "1") is found
    assert [(r["id"], r["action"]) for r in rs.load(path)["resources"]] == [("mine", "created")]


def test_pods_not_terminated_keeps_stopped_and_running_pods_and_drops_terminated_ones():
    document = {
        "resources": [
            {"kind": "pod", "id": "run", "status": "RUNNING"},
            # A stopped pod has a final entry too (teardown's stop reads it back): it still bills.
            {"kind": "pod", "id": "stopped", "status": "EXITED", "final": {"status": "EXITED", "source": "api"}},
            {"kind": "pod", "id": "gone", "status": "RUNNING", "final": {"status": "TERMINATED", "source": "api"}},
            {"kind": "pod", "id": "gone2", "status": "TERMINATED"},
            {"kind": "pod", "id": "unknown"},
            {"kind": "network_volume", "id": "vol", "status": "available"},
        ]
    }
    assert [p["id"] for p in rs.pods_not_terminated(document)] == ["run", "stopped", "unknown"]
    assert rs.pods_not_terminated(None) == [] and rs.pods_not_terminated({}) == []
    assert rs.last_status({"status": "RUNNING", "final": {"status": "EXITED"}}) == "EXITED"


# --- the runs a pod belongs to ------------------------------------------------------------------------------


def test_runs_of_pod_reads_every_runs_record_and_the_name(tmp_path):
    runs = tmp_path / "runs"
    rs.record(str(runs / "a" / "state.json"), "a", [pod("p1", name="trainops-a-smoke")])
    rs.record(str(runs / "b" / "state.json"), "b", [pod("p1", name="trainops-a-smoke"), pod("p2")])
    rs.record(str(runs / "run-2" / "state.json"), "run-2", [pod("p3")])
    (runs / "broken").mkdir()
    (runs / "broken" / "state.json").write_text("{not json")
    assert rs.runs_of_pod(str(runs), "p1", "trainops-a-smoke") == ["a", "b"]
    assert rs.runs_of_pod(str(runs), "p2") == ["b"]
    # The name alone: the longest run id it carries that has a run directory (run ids may hold '-').
    assert rs.runs_of_pod(str(runs), "p9", "trainops-run-2-drill-3") == ["run-2"]
    assert rs.runs_of_pod(str(runs), "p9", "trainops-run-2-drill-3", prefix="other") == []
    assert rs.runs_of_pod(str(runs), "p9", "trainops-nosuch-smoke") == []
    assert rs.runs_of_pod(str(runs / "missing"), "p1", "trainops-a-smoke") == []
