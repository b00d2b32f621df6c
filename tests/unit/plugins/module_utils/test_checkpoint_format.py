# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checkpoint format on its own (no torch): checkpoints built by hand from the format's functions,
then verified, damaged and chained; and the run layout, as the collection imports both. The
trainer-written side is tested in training/tests."""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import json
import os
import pathlib
import shutil
import threading
import time

import pytest

from ansible_collections.trainops.gpu.plugins.module_utils import _checkpoint_format as fmt
from ansible_collections.trainops.gpu.plugins.module_utils import _run_layout as layout_lib


def make_checkpoint(root, step, previous=None, payloads=None):
    """A committed checkpoint as the writer lays it out; returns (path, manifest sha256)."""
    payloads = payloads or {"model.pt": b"weights-%d" % step, "state.pt": os.urandom(3000)}
    path = os.path.join(str(root), fmt.step_dirname(step))
    os.makedirs(path)
    files = {}
    for name, data in payloads.items():
        with open(os.path.join(path, name), "wb") as handle:
            handle.write(data)
        files[name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest = fmt.build_manifest(
        step, "run", "sha256:x", {}, 1, {}, files, previous[0] if previous else None, previous[1] if previous else None
    )
    raw = fmt.manifest_bytes(manifest)
    with open(os.path.join(path, fmt.MANIFEST_NAME), "wb") as handle:
        handle.write(raw)
    sums = {name: entry["sha256"] for name, entry in files.items()}
    sums[fmt.MANIFEST_NAME] = hashlib.sha256(raw).hexdigest()
    with open(os.path.join(path, fmt.SUMS_NAME), "w") as handle:
        handle.write(fmt.format_sums(sums))
    return path, sums[fmt.MANIFEST_NAME]


def _append(directory, name, data):
    with open(os.path.join(directory, name), "ab") as handle:
        handle.write(data)


def _overwrite_first_byte(directory, name):
    with open(os.path.join(directory, name), "r+b") as handle:
        handle.write(b"W")


def _replace(directory, name, text):
    with open(os.path.join(directory, name), "w") as handle:
        handle.write(text)


@pytest.fixture
def chain(tmp_path):
    """Three chained checkpoints: steps 10, 20, 30."""
    previous = None
    paths = {}
    for step in (10, 20, 30):
        path, digest = make_checkpoint(tmp_path, step, previous)
        paths[step] = path
        previous = (step, digest)
    return tmp_path, paths


def test_a_well_formed_root_verifies_newest_first(chain):
    root, paths = chain
    report = fmt.verify_root(str(root))
    assert [c.step for c in report.checkpoints] == [30, 20, 10]
    assert all(c.valid for c in report.checkpoints)
    summary = report.to_dict()
    assert summary["newest_valid_step"] == 30 and summary["newest_valid_path"] == paths[30]
    assert summary["corrupt"] == [] and summary["stray_temp"] == []


@pytest.mark.parametrize(
    "damage, expected",
    [
        (lambda p: _append(p, "model.pt", b"x"), "model.pt: size"),
        (lambda p: _overwrite_first_byte(p, "model.pt"), "model.pt: sha256 mismatch"),
        (lambda p: os.unlink(os.path.join(p, fmt.SUMS_NAME)), "SHA256SUMS missing"),
        (lambda p: os.unlink(os.path.join(p, fmt.MANIFEST_NAME)), "manifest.json missing"),
        (lambda p: os.unlink(os.path.join(p, "state.pt")), "state.pt: missing"),
        (lambda p: _append(p, "extra.bin", b""), "unlisted entry 'extra.bin'"),
        (lambda p: _append(p, fmt.MANIFEST_NAME, b" "), "manifest.json: sha256 mismatch"),
        (lambda p: _replace(p, fmt.SUMS_NAME, "garbage\n"), "SHA256SUMS unreadable"),
    ],
)
def test_damage_to_the_newest_makes_the_previous_one_newest_valid(chain, damage, expected):
    root, paths = chain
    damage(paths[30])
    report = fmt.verify_root(str(root))
    assert report.newest_valid.step == 20
    assert [c.step for c in report.corrupt] == [30]
    assert any(expected in error for error in report.corrupt[0].errors), report.corrupt[0].errors


def test_an_empty_step_directory_is_corrupt(tmp_path):
    os.makedirs(os.path.join(str(tmp_path), fmt.step_dirname(5)))
    report = fmt.verify_root(str(tmp_path))
    assert report.newest_valid is None and report.corrupt[0].errors == ["empty directory"]


def test_a_broken_chain_condemns_the_successor_only_when_the_predecessor_is_intact(chain):
    root = chain[0]
    make_checkpoint(root, 40, previous=(30, "0" * 64))
    report = fmt.verify_root(str(root))
    assert [(c.step, c.valid) for c in report.checkpoints][:2] == [(40, False), (30, True)]
    assert "manifest chain broken" in report.checkpoints[0].errors[0]


def test_a_pruned_predecessor_leaves_the_link_unchecked(chain):
    root, paths = chain
    for name in os.listdir(paths[20]):
        os.unlink(os.path.join(paths[20], name))
    os.rmdir(paths[20])
    report = fmt.verify_root(str(root))
    assert [(c.step, c.valid) for c in report.checkpoints] == [(30, True), (10, True)]


def test_temp_aside_and_latest_are_reported_not_verified(chain):
    root, paths = chain
    os.makedirs(os.path.join(str(root), fmt.temp_dirname(40, 99, "ab")))
    moved = fmt.move_aside(paths[10], fmt.ASIDE_CORRUPT, datetime.datetime(2026, 1, 2, 3, 4, 5))
    with open(os.path.join(str(root), fmt.LATEST_NAME), "w") as handle:
        handle.write("step-00000040\n")
    report = fmt.verify_root(str(root), stop_at_first_valid=True)
    assert [c.step for c in report.checkpoints] == [30]
    assert report.unverified == [paths[20]]
    assert report.aside == [moved] and os.path.basename(moved) == "step-00000010.corrupt-20260102T030405Z"
    assert len(report.stray_temp) == 1 and report.latest_hint == "step-00000040"


def test_move_aside_never_overwrites(tmp_path):
    when = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    first = tmp_path / "step-00000001"
    first.mkdir()
    (first / "life").write_text("first")
    moved_first = fmt.move_aside(str(first), fmt.ASIDE_CORRUPT, when)
    first.mkdir()
    (first / "life").write_text("second")
    moved_second = fmt.move_aside(str(first), fmt.ASIDE_CORRUPT, when)
    assert moved_second == moved_first + "-1"
    assert fmt.parse_aside_dirname(os.path.basename(moved_second)) == ("step-00000001", "corrupt")
    # the next free name is taken by a plain file (not a directory): it is skipped, not replaced
    taken = tmp_path / (os.path.basename(moved_first) + "-2")
    taken.write_text("not ours")
    first.mkdir()
    (first / "life").write_text("third")
    moved_third = fmt.move_aside(str(first), fmt.ASIDE_CORRUPT, when)
    assert moved_third == moved_first + "-3"
    assert taken.read_text() == "not ours"
    lives = [(pathlib.Path(path) / "life").read_text() for path in (moved_first, moved_second, moved_third)]
    assert lives == ["first", "second", "third"] and not first.exists()


def test_is_checkpoint_dir_tells_a_checkpoint_from_a_root(chain):
    root, paths = chain
    assert fmt.is_checkpoint_dir(paths[10])
    assert not fmt.is_checkpoint_dir(str(root))


def test_manifest_bytes_are_canonical(chain):
    paths = chain[1]
    with open(os.path.join(paths[30], fmt.MANIFEST_NAME), "rb") as handle:
        raw = handle.read()
    assert fmt.manifest_bytes(json.loads(raw)) == raw


def test_manifest_bytes_are_the_documented_sorted_key_json():
    """docs/checkpoints.md: sorted-key JSON, every level, 2-space indent, UTF-8, one final newline. The
    manifest below is built with its keys out of order; the expected bytes are written out by hand."""
    manifest = {
        "world_size": 2,
        "step": 120,
        "source": {"dirty": False, "commit": "abc"},
        "files": {"z.pt": {"size": 3, "sha256": "b" * 64}, "a.pt": {"sha256": "a" * 64, "size": 1}},
        "format": "trainops-checkpoint",
        "run_id": "r\u00e9",
        "previous_step": None,
    }
    expected = (
        "{\n"
        '  "files": {\n'
        '    "a.pt": {\n      "sha256": "' + "a" * 64 + '",\n      "size": 1\n    },\n'
        '    "z.pt": {\n      "sha256": "' + "b" * 64 + '",\n      "size": 3\n    }\n'
        "  },\n"
        '  "format": "trainops-checkpoint",\n'
        '  "previous_step": null,\n'
        '  "run_id": "r\\u00e9",\n'
        '  "source": {\n    "commit": "abc",\n    "dirty": false\n  },\n'
        '  "step": 120,\n'
        '  "world_size": 2\n'
        "}\n"
    ).encode("ascii")
    assert fmt.manifest_bytes(manifest) == expected


def test_writer_lock_held_only_while_someone_holds_the_flock(tmp_path):
    assert not fmt.writer_lock_held(str(tmp_path))  # no lock file: no trainer
    fd = os.open(os.path.join(str(tmp_path), fmt.WRITER_LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        assert not fmt.writer_lock_held(str(tmp_path))  # a lock file left by a dead trainer
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # flock locks belong to the open file description: a second open (as another process has) conflicts
        assert fmt.writer_lock_held(str(tmp_path))
    finally:
        os.close(fd)
    assert not fmt.writer_lock_held(str(tmp_path))


def test_run_layout_as_the_collection_imports_it(tmp_path):
    durable = str(tmp_path)
    layout = layout_lib.RunLayout.for_run(durable, "run42")
    run_dir = os.path.join(durable, "trainops", "run42")
    assert layout == layout_lib.RunLayout.from_run_dir(run_dir)
    assert layout.ckpt == os.path.join(run_dir, "ckpt")
    assert layout.result == os.path.join(run_dir, "logs", "result.json")
    assert layout.job_file("train", layout_lib.JOB_EXIT_CODE_NAME) == os.path.join(run_dir, "job", "train", "exit_code")
    assert layout_lib.cache_dir(durable) == os.path.join(durable, "cache")
    assert layout_lib.status_for_exit(layout_lib.EXIT_INTERRUPTED) == "interrupted"
    assert layout_lib.status_for_exit(137) == "failed"
    # the checkpoint root of a run is where the format finds its checkpoints
    path, _sha = make_checkpoint(layout.ckpt, 10)
    report = fmt.verify_root(layout.ckpt)
    assert [c.path for c in report.checkpoints] == [path] and report.newest_valid.step == 10


# ------------------------------------------------------------- a verifier that cannot be hung or fooled


def _within(seconds, function, unblock=None):
    """function()'s result, which must come within seconds (run on a daemon thread: a hang fails the test
    instead of hanging it); unblock() then frees a thread that did hang."""
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("result", function()), daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(seconds)
    hung = thread.is_alive()
    if hung and unblock is not None:
        unblock()
    assert not hung, f"still running after {time.monotonic() - started:.1f} s"
    return box["result"]


def _open_fifo_writer(path):
    """A FIFO opened for reading blocks until a writer opens it: be that writer."""
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


def _rewrite_manifest(path, raw):
    """Replace a checkpoint's manifest.json with raw bytes and re-list it in SHA256SUMS (self-consistent)."""
    with open(os.path.join(path, fmt.MANIFEST_NAME), "wb") as handle:
        handle.write(raw)
    with open(os.path.join(path, fmt.SUMS_NAME)) as handle:
        sums = fmt.parse_sums(handle.read())
    sums[fmt.MANIFEST_NAME] = hashlib.sha256(raw).hexdigest()
    _replace(path, fmt.SUMS_NAME, fmt.format_sums(sums))


def test_a_fifo_as_latest_never_blocks_and_gives_no_hint(chain):
    root = str(chain[0])
    latest = os.path.join(root, fmt.LATEST_NAME)
    os.mkfifo(latest)
    report = _within(5, lambda: fmt.verify_root(root), unblock=lambda: _open_fifo_writer(latest))
    assert report.latest_hint is None and report.newest_valid.step == 30


@pytest.mark.parametrize("name", [fmt.MANIFEST_NAME, fmt.SUMS_NAME])
def test_a_fifo_in_a_checkpoint_never_blocks_and_is_corrupt(chain, name):
    root, paths = chain
    fifo = os.path.join(paths[30], name)
    os.unlink(fifo)
    os.mkfifo(fifo)
    report = _within(5, lambda: fmt.verify_root(str(root)), unblock=lambda: _open_fifo_writer(fifo))
    assert [c.step for c in report.corrupt] == [30] and report.newest_valid.step == 20
    assert any(f"{name}: not a regular file" in error for error in report.corrupt[0].errors), report.corrupt


def _sparse_terabyte(path, listed_size):
    """Make the checkpoint's state.pt a 1 TiB sparse file, listed in manifest and SHA256SUMS with listed_size."""
    os.truncate(os.path.join(path, "state.pt"), 1 << 40)
    with open(os.path.join(path, fmt.MANIFEST_NAME), "rb") as handle:
        manifest = json.loads(handle.read())
    manifest["files"]["state.pt"] = {"size": listed_size, "sha256": "0" * 64}
    _rewrite_manifest(path, fmt.manifest_bytes(manifest))
    sums = fmt.parse_sums(pathlib.Path(path, fmt.SUMS_NAME).read_text())
    sums["state.pt"] = "0" * 64
    _replace(path, fmt.SUMS_NAME, fmt.format_sums(sums))


def test_a_sparse_terabyte_file_of_another_size_fails_on_its_size_unread(chain):
    root, paths = chain
    _sparse_terabyte(paths[30], 3000)
    report = _within(3, lambda: fmt.verify_root(str(root), deadline=time.monotonic() + 600))
    assert report.corrupt[0].errors == [f"state.pt: size {1 << 40}, manifest says 3000"]
    assert report.newest_valid.step == 20 and report.timed_out is None


def test_a_sparse_terabyte_file_listed_at_its_size_stops_at_the_deadline(chain):
    root, paths = chain
    _sparse_terabyte(paths[30], 1 << 40)
    started = time.monotonic()
    report = _within(10, lambda: fmt.verify_root(str(root), deadline=time.monotonic() + 1.0))
    assert time.monotonic() - started < 3
    assert report.timed_out == paths[30] and report.checkpoints[0].timed_out
    assert "verification timed out: hashing state.pt" in report.checkpoints[0].errors[0]
    # it is neither valid nor corrupt (never quarantined); the older ones were not verified
    assert report.newest_valid is None and report.corrupt == []
    assert report.unverified == [paths[20], paths[10]]
    assert report.to_dict()["timed_out"] == paths[30]


def test_a_deeply_nested_manifest_is_its_checkpoints_error_only(chain):
    root, paths = chain
    _rewrite_manifest(paths[30], b"[" * 100000 + b"]" * 100000)
    report = fmt.verify_root(str(root))
    assert [c.step for c in report.corrupt] == [30] and report.newest_valid.step == 20
    assert f"nests deeper than {fmt.MANIFEST_MAX_DEPTH} levels" in report.corrupt[0].errors[0]


def test_json_depth_is_counted_without_recursion_and_skips_strings():
    fmt.check_json_depth('{"a": [[1]], "b": "[[[[[[[[", "c": "\\\\\\"{{{{"}', 3)
    with pytest.raises(fmt.CheckpointFormatError, match="nests deeper than 3"):
        fmt.check_json_depth('{"a": [[{"b": 1}]]}', 3)
    with pytest.raises(fmt.CheckpointFormatError, match="nests deeper"):
        fmt.check_json_depth("[" * 1000000, fmt.MANIFEST_MAX_DEPTH)
    with pytest.raises(fmt.CheckpointFormatError, match="unterminated"):
        fmt.check_json_depth('["abc', 3)


def test_an_oversized_manifest_is_malformed(chain):
    root, paths = chain
    _rewrite_manifest(paths[30], b" " * (fmt.MANIFEST_MAX_BYTES + 1) + b"{}")
    report = fmt.verify_root(str(root))
    assert f"larger than {fmt.MANIFEST_MAX_BYTES} bytes" in report.corrupt[0].errors[0]


def test_any_failure_inside_one_checkpoint_is_that_checkpoints_error(chain, monkeypatch):
    root = chain[0]
    schema = fmt.manifest_errors

    def explode_on_step_20(manifest):
        if isinstance(manifest, dict) and manifest.get("step") == 20:
            raise RuntimeError("boom")
        return schema(manifest)

    monkeypatch.setattr(fmt, "manifest_errors", explode_on_step_20)
    report = fmt.verify_root(str(root))
    assert [(c.step, c.valid) for c in report.checkpoints] == [(30, True), (20, False), (10, True)]
    assert report.checkpoints[1].errors == ["verification failed: RuntimeError: boom"]


def _good_manifest(**changes):
    manifest = fmt.build_manifest(
        20, "run", "sha256:x", {}, 1, {}, {"model.pt": {"size": 1, "sha256": "a" * 64}}, 10, "b" * 64
    )
    manifest.update(changes)
    return manifest


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"previous_step": True}, "'previous_step' has the wrong type"),
        ({"step": True}, "'step' has the wrong type"),
        ({"format_version": True}, "'format_version' has the wrong type"),
        ({"format_version": 0}, "format_version 0 is not a version"),
        ({"format_version": -7}, "format_version -7 is not a version"),
        ({"format_version": 2}, "format_version 2 is newer"),
        ({"world_size": 0}, "world_size 0 is not at least 1"),
        ({"world_size": False}, "'world_size' has the wrong type"),
        ({"created_at": ""}, "created_at '' is not an RFC 3339 timestamp"),
        ({"created_at": "yesterday"}, "is not an RFC 3339"),
        ({"created_at": "2026-12-02T17:00:00"}, "is not an RFC 3339"),  # no offset
        ({"created_at": "2026-13-02T17:00:00Z"}, "is not an RFC 3339"),
        ({"created_at": "2026-12-02T17:00:00Z\n"}, "is not an RFC 3339"),
        ({"previous_manifest_sha256": "x"}, "previous_manifest_sha256 is not 64"),
        ({"previous_step": -1}, "previous_step -1 is not before"),
    ],
)
def test_manifest_types_and_values_are_strict(changes, expected):
    errors = fmt.manifest_errors(_good_manifest(**changes))
    assert any(expected in error for error in errors), errors


@pytest.mark.parametrize(
    "created_at", ["2026-12-02T17:00:00Z", "2026-12-02T17:00:00.123456+00:00", "2026-12-02 17:00:00-07:30"]
)
def test_rfc3339_timestamps_pass(created_at):
    assert fmt.manifest_errors(_good_manifest(created_at=created_at)) == []


def test_latest_is_a_validated_step_name_never_a_files_text(chain, tmp_path_factory):
    root = str(chain[0])
    latest = os.path.join(root, fmt.LATEST_NAME)
    secret = tmp_path_factory.mktemp("outside") / "passwd"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n")
    os.symlink(str(secret), latest)
    assert fmt.verify_root(root).latest_hint is None  # a symbolic link is never read
    os.unlink(latest)
    _replace(root, fmt.LATEST_NAME, secret.read_text())
    assert fmt.verify_root(root).latest_hint is None  # a regular file, but not a step name
    _replace(root, fmt.LATEST_NAME, "step-00000030\n")
    assert fmt.verify_root(root).latest_hint == "step-00000030"


def _outside_checkpoint(tmp_path_factory, step):
    """A valid checkpoint outside the root (where a symbolic link could point)."""
    return make_checkpoint(tmp_path_factory.mktemp("outside"), step)[0]


@pytest.mark.parametrize("name", [fmt.MANIFEST_NAME, fmt.SUMS_NAME, "model.pt"])
def test_a_file_symlinked_outside_the_root_is_corrupt(tmp_path, tmp_path_factory, name):
    outside = _outside_checkpoint(tmp_path_factory, 40)
    inside = os.path.join(str(tmp_path), fmt.step_dirname(40))
    shutil.copytree(outside, inside)
    os.unlink(os.path.join(inside, name))
    os.symlink(os.path.join(outside, name), os.path.join(inside, name))  # same bytes, but through a link
    report = fmt.verify_root(str(tmp_path))
    assert report.newest_valid is None and [c.step for c in report.corrupt] == [40]
    assert any(f"{name}: is a symbolic link" in error for error in report.corrupt[0].errors), report.corrupt


def test_a_step_directory_symlinked_outside_the_root_is_corrupt(tmp_path, tmp_path_factory):
    outside = _outside_checkpoint(tmp_path_factory, 40)
    link = os.path.join(str(tmp_path), fmt.step_dirname(40))
    os.symlink(outside, link)
    for report in (fmt.verify_root(str(tmp_path)).checkpoints[0], fmt.verify_checkpoint(link)):
        assert not report.valid and report.errors == ["is a symbolic link"]


def test_every_spelling_of_a_step_directory_is_reported(chain):
    root, paths = chain
    odd = [os.path.join(str(root), name) for name in ("step-000000030", "step-030", "step-0000030")]
    for path in odd:
        shutil.copytree(paths[30], path)
    report = fmt.verify_root(str(root))
    assert [c.path for c in report.checkpoints] == [paths[30], paths[20], paths[10], *sorted(odd)]
    assert report.newest_valid.path == paths[30]
    for checkpoint in report.checkpoints[3:]:
        assert not checkpoint.valid and checkpoint.errors[0].startswith("non-canonical name"), checkpoint.errors
    assert sorted(c["path"] for c in report.to_dict()["corrupt"]) == sorted(odd)
    for name in ("step-000000030", "step-030", "step-0000030"):
        assert fmt.parse_step_dirname(name) is None
