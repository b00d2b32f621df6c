# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checkpoint format on its own (no torch): checkpoints built by hand from the format's functions,
then verified, damaged and chained; and the run layout, as the collection imports both. The
trainer-written side is tested in training/tests."""

from __future__ import annotations

import datetime
import fcntl
import hashlib
import json
import os

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
    second = tmp_path / "again"
    first.mkdir()
    moved_first = fmt.move_aside(str(first), fmt.ASIDE_CORRUPT, when)
    first.mkdir()
    moved_second = fmt.move_aside(str(first), fmt.ASIDE_CORRUPT, when)
    assert moved_second == moved_first + "-1"
    assert fmt.parse_aside_dirname(os.path.basename(moved_second)) == ("step-00000001", "corrupt")
    assert not second.exists()


def test_is_checkpoint_dir_tells_a_checkpoint_from_a_root(chain):
    root, paths = chain
    assert fmt.is_checkpoint_dir(paths[10])
    assert not fmt.is_checkpoint_dir(str(root))


def test_manifest_bytes_are_canonical(chain):
    paths = chain[1]
    with open(os.path.join(paths[30], fmt.MANIFEST_NAME), "rb") as handle:
        raw = handle.read()
    assert fmt.manifest_bytes(json.loads(raw)) == raw


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
