"""The checkpoint format and the writer, in process: names, SHA256SUMS, manifest schema, and the proof
that what the writer commits is exactly what the verifier (and coreutils' sha256sum) accepts."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess

import pytest
import torch
from trainer_harness import ROOT, assert_sha256sum_accepts
from trainops_train import cadence, checkpoint_format, journal, run_layout
from trainops_train import config as config_lib
from trainops_train.checkpoint_writer import (
    PARALLEL_HASH_BYTES,
    WRITE_SLICE_BYTES,
    CheckpointSaveError,
    CheckpointWriter,
)


def _payloads(step: int) -> dict[str, object]:
    generator = torch.Generator().manual_seed(step)
    return {
        # below, above and well above the sizes where the writer switches to parallel, sliced hashing
        "small.pt": {"w": torch.randn(16, 16, generator=generator), "step": step},
        "medium.pt": {"w": torch.randn(PARALLEL_HASH_BYTES // 4 + 7, generator=generator)},
        "large.pt": {"w": torch.randn(WRITE_SLICE_BYTES // 4 * 2 + 123, generator=generator), "b": [1, 2.5, "x"]},
    }


def _writer(root: pathlib.Path, keep_last: int = 2, previous=None) -> CheckpointWriter:
    return CheckpointWriter(
        str(root), "run-x", "sha256:" + "a" * 64, {"commit": "abc"}, 1, keep_last=keep_last, previous=previous
    )


def test_names_round_trip_and_reject_lookalikes():
    assert checkpoint_format.step_dirname(42) == "step-00000042"
    assert checkpoint_format.parse_step_dirname("step-00000042") == 42
    assert checkpoint_format.parse_step_dirname("step-123456789") == 123456789
    for name in ("step-42", "step-0000004x", "step-00000042.corrupt-20260101T000000Z", ".tmp-step-00000042-1-ab"):
        assert checkpoint_format.parse_step_dirname(name) is None, name
    temp = checkpoint_format.temp_dirname(42, 1234, "beef")
    assert checkpoint_format.parse_temp_dirname(temp) == 42 and checkpoint_format.parse_step_dirname(temp) is None
    assert checkpoint_format.parse_deleting_dirname(checkpoint_format.deleting_dirname(7, "ab")) == 7
    aside = checkpoint_format.aside_dirname(temp, checkpoint_format.ASIDE_PARTIAL)
    assert checkpoint_format.parse_aside_dirname(aside) == (temp.lstrip("."), checkpoint_format.ASIDE_PARTIAL)
    with pytest.raises(checkpoint_format.CheckpointFormatError):
        checkpoint_format.step_dirname(-1)
    with pytest.raises(checkpoint_format.CheckpointFormatError):
        checkpoint_format.aside_dirname("step-00000001", "broken")


def test_sums_agree_with_coreutils_both_ways(tmp_path):
    hashes = {}
    for name, data in (("a.pt", b"alpha"), ("b-1.bin", os.urandom(70000)), (checkpoint_format.MANIFEST_NAME, b"{}\n")):
        (tmp_path / name).write_bytes(data)
        hashes[name] = hashlib.sha256(data).hexdigest()
    (tmp_path / checkpoint_format.SUMS_NAME).write_text(checkpoint_format.format_sums(hashes))
    assert_sha256sum_accepts(tmp_path)
    produced = subprocess.run(
        ["sha256sum", *sorted(hashes)], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert checkpoint_format.parse_sums(produced) == hashes
    binary_mode = subprocess.run(
        ["sha256sum", "-b", *sorted(hashes)], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert checkpoint_format.parse_sums(binary_mode) == hashes


@pytest.mark.parametrize(
    "text",
    ["", "nothex  a.pt\n", "a" * 64 + "  ../etc/passwd\n", "a" * 64 + "  a.pt\n" + "b" * 64 + "  a.pt\n", "a" * 63],
)
def test_parse_sums_rejects_malformed(text):
    with pytest.raises(checkpoint_format.CheckpointFormatError):
        checkpoint_format.parse_sums(text)


def test_manifest_schema_is_enforced():
    files = {"model.pt": {"size": 3, "sha256": "0" * 64}}
    good = checkpoint_format.build_manifest(5, "r", "h", {}, 1, {}, files, 4, "1" * 64)
    assert checkpoint_format.manifest_errors(good) == []
    assert checkpoint_format.manifest_errors(json.loads(checkpoint_format.manifest_bytes(good))) == []
    for mutate, expected in (
        (lambda m: m.pop("step"), "lacks 'step'"),
        (lambda m: m.update(step="5"), "'step' has the wrong type"),
        (lambda m: m.update(previous_step=None), "both be set or both be null"),
        (lambda m: m.update(previous_step=9), "not before step"),
        (lambda m: m.update(files={"../x": {"size": 1, "sha256": "0" * 64}}), "disallowed file name"),
        (lambda m: m.update(files={"a.pt": {"size": True, "sha256": "0" * 64}}), "needs an integer size"),
        (lambda m: m.update(format="other"), "format is 'other'"),
        (lambda m: m.update(format_version=99), "newer than this reader"),
    ):
        broken = json.loads(checkpoint_format.manifest_bytes(good))
        mutate(broken)
        errors = checkpoint_format.manifest_errors(broken)
        assert any(expected in error for error in errors), (expected, errors)


def test_writer_and_verifier_agree(tmp_path):
    root = tmp_path / "ckpt"
    writer = _writer(root, keep_last=2)
    try:
        saved = [writer.save(step, _payloads(step), {"rng": ["torch_cpu"]}) for step in (10, 20, 30)]
    finally:
        writer.close()
    # keep-last-2: step 10 pruned; nothing else left behind
    assert sorted(os.listdir(root)) == [checkpoint_format.LATEST_NAME, "step-00000020", "step-00000030"]
    assert (root / checkpoint_format.LATEST_NAME).read_text() == "step-00000030\n"
    report = checkpoint_format.verify_root(str(root))
    assert [c.step for c in report.checkpoints] == [30, 20] and not report.corrupt
    newest = report.newest_valid
    assert newest is not None and newest.manifest is not None
    # the chain: 30 names 20's manifest hash, 20 names the (pruned) 10's
    assert newest.manifest["previous_step"] == 20
    assert newest.manifest["previous_manifest_sha256"] == report.checkpoints[1].manifest_sha256
    assert report.checkpoints[1].manifest["previous_manifest_sha256"] == saved[0].manifest_sha256
    for checkpoint in report.checkpoints:
        path = pathlib.Path(checkpoint.path)
        assert_sha256sum_accepts(path)
        for name, entry in checkpoint.manifest["files"].items():
            data = (path / name).read_bytes()
            # the hash computed while writing is the hash of the bytes on disk
            assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        loaded = torch.load(path / "large.pt", weights_only=True)
        assert torch.equal(loaded["w"], _payloads(checkpoint.step)["large.pt"]["w"])
    assert saved[-1].manifest_sha256 == newest.manifest_sha256


def test_commit_refuses_to_overwrite_and_rejects_bad_names(tmp_path):
    writer = _writer(tmp_path)
    try:
        writer.save(1, {"a.pt": torch.zeros(2)}, {})
        with pytest.raises(CheckpointSaveError, match="already exists"):
            writer.save(1, {"a.pt": torch.zeros(2)}, {})
        with pytest.raises(CheckpointSaveError, match="not allowed"):
            writer.save(2, {"../a.pt": torch.zeros(2)}, {})
    finally:
        writer.close()


class _CorruptingWriter(CheckpointWriter):
    """A disk that flips a bit of what was just committed (fault injection for the verify-before-prune rule)."""

    def commit(self, step, payloads, captured):
        saved = super().commit(step, payloads, captured)
        path = pathlib.Path(saved.path) / "a.pt"
        data = bytearray(path.read_bytes())
        data[-30] ^= 0x10
        path.write_bytes(bytes(data))
        return saved


def test_pruning_never_runs_before_the_new_checkpoint_verifies(tmp_path):
    writer = _writer(tmp_path, keep_last=1)
    writer.save(1, {"a.pt": torch.ones(4)}, {})
    writer.close()
    corrupting = _CorruptingWriter(
        str(tmp_path), "run-x", "sha256:" + "a" * 64, {}, 1, keep_last=1, previous=writer.previous
    )
    try:
        with pytest.raises(CheckpointSaveError, match="failed verification"):
            corrupting.save(2, {"a.pt": torch.ones(4)}, {})
    finally:
        corrupting.close()
    assert corrupting.previous == writer.previous  # a later save chains to step 1, not to the bad step 2
    report = checkpoint_format.verify_root(str(tmp_path))
    # step 1 survived (keep_last=1 would have pruned it), the corrupt step 2 was moved aside, not deleted
    assert [c.step for c in report.checkpoints] == [1] and report.checkpoints[0].valid
    assert [checkpoint_format.parse_aside_dirname(pathlib.Path(p).name) for p in report.aside] == [
        ("step-00000002", checkpoint_format.ASIDE_CORRUPT)
    ]


def test_pruning_moves_a_corrupt_old_checkpoint_aside_instead_of_deleting_it(tmp_path):
    writer = _writer(tmp_path, keep_last=1)
    try:
        writer.save(1, {"a.pt": torch.ones(4)}, {})
        os.truncate(tmp_path / "step-00000001" / "a.pt", 10)
        writer.save(2, {"a.pt": torch.ones(4)}, {})
    finally:
        writer.close()
    report = checkpoint_format.verify_root(str(tmp_path))
    assert [c.step for c in report.checkpoints] == [2]
    assert [checkpoint_format.parse_aside_dirname(pathlib.Path(p).name)[0] for p in report.aside] == ["step-00000001"]


def test_verify_root_reports_chain_only_between_intact_neighbours(tmp_path):
    writer = _writer(tmp_path, keep_last=5)
    try:
        for step in (1, 2, 3):
            writer.save(step, {"a.pt": torch.full((3,), float(step))}, {})
    finally:
        writer.close()
    # damage the middle checkpoint's manifest: it is corrupt, and 3's link to it is not judged by it
    manifest = tmp_path / "step-00000002" / checkpoint_format.MANIFEST_NAME
    manifest.write_text(manifest.read_text().replace('"run_id": "run-x"', '"run_id": "run-y"'))
    report = checkpoint_format.verify_root(str(tmp_path))
    assert [(c.step, c.valid) for c in report.checkpoints] == [(3, True), (2, False), (1, True)]
    assert any("manifest.json: sha256 mismatch" in e for e in report.checkpoints[1].errors)


def test_daly_interval_and_cadence():
    # worked example of docs/checkpoints.md: C = 30 s, M = 4 h
    assert cadence.young_interval(30, 14400) == pytest.approx(899.5, abs=0.1)
    assert cadence.daly_interval(30, 14400) == pytest.approx(909.6, abs=0.1)
    assert cadence.daly_interval(50, 20) == 20  # C >= 2M: checkpoint every M
    assert cadence.daly_interval(0, 100) == 0
    auto = cadence.CheckpointCadence(config_lib.CheckpointConfig(mode="auto", mtbi_seconds=200.0), 0, now=0.0)
    assert auto.due(1, now=0.0)  # the first save is taken at once, to measure C
    auto.saved(1, now=1.0, seconds=2.0)
    interval = cadence.daly_interval(2.0, 200.0)
    assert not auto.due(2, now=1.0 + interval - 0.01) and auto.due(2, now=1.0 + interval)
    steps = cadence.CheckpointCadence(config_lib.CheckpointConfig(mode="steps", every_steps=3), 10, now=0.0)
    assert [step for step in range(11, 20) if steps.due(step, 0.0)] == [13, 14, 15, 16, 17, 18, 19]
    seconds = cadence.CheckpointCadence(config_lib.CheckpointConfig(mode="seconds", every_seconds=5.0), 0, 0.0)
    assert not seconds.due(1, 4.9) and seconds.due(1, 5.0)


def test_config_errors_name_what_is_wrong_and_hash_covers_the_math(tmp_path):
    with pytest.raises(config_lib.ConfigError, match=r"unknown config key.*model\.width"):
        config_lib.from_dict({"model": {"width": 3}})
    with pytest.raises(config_lib.ConfigError, match="steps must be an integer"):
        config_lib.from_dict({"steps": "10"})
    with pytest.raises(config_lib.ConfigError, match=r"checkpoint\.mode must be"):
        config_lib.from_dict({"checkpoint": {"mode": "sometimes"}})
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(config_lib.ConfigError, match="not valid JSON"):
        config_lib.load(tmp_path / "bad.json")
    base = config_lib.config_hash(config_lib.from_dict({}))
    assert config_lib.config_hash(config_lib.from_dict({"checkpoint": {"every_steps": 7}, "run_id": "x"})) == base
    assert config_lib.config_hash(config_lib.from_dict({"optim": {"lr": 0.02}})) != base
    assert config_lib.config_hash(config_lib.from_dict({"steps": 100})) != base


def test_journal_drops_torn_lines_and_truncates_to_the_resumed_step(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": step}) + "\n" for step in range(1, 8)) + '{"step": 8, "lo')
    assert [r["step"] for r in journal.read_records(str(path))] == list(range(1, 8))
    assert journal.truncate_metrics(str(path), 5) == 2
    assert [r["step"] for r in journal.read_records(str(path))] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    ("module", "collection_name"), [(checkpoint_format, "_checkpoint_format.py"), (run_layout, "_run_layout.py")]
)
def test_the_collection_reads_the_packages_module(module, collection_name):
    """One definition: the package's module is a regular file, and the collection's module_utils file is a
    relative symlink to it (so a built collection keeps the link, and a copy of training/ has the file)."""
    packaged = pathlib.Path(module.__file__)
    assert packaged.resolve() == ROOT / "training" / "trainops_train" / packaged.name
    assert packaged.is_file() and not packaged.is_symlink()
    shared = ROOT / "plugins" / "module_utils" / collection_name
    assert shared.is_symlink() and not os.path.isabs(os.readlink(shared))
    assert shared.resolve() == packaged.resolve()


def test_run_layout_names_every_pod_side_path():
    layout = run_layout.RunLayout.for_run("/durable", "run42")
    assert layout == run_layout.RunLayout.from_run_dir("/durable/trainops/run42")
    assert (layout.src, layout.ckpt, layout.logs) == (
        "/durable/trainops/run42/src",
        "/durable/trainops/run42/ckpt",
        "/durable/trainops/run42/logs",
    )
    assert (layout.metrics, layout.events, layout.result) == (
        "/durable/trainops/run42/logs/metrics.jsonl",
        "/durable/trainops/run42/logs/events.jsonl",
        "/durable/trainops/run42/logs/result.json",
    )
    assert layout.job_dir("train") == "/durable/trainops/run42/job/train"
    assert [layout.job_file("train", name) for name in run_layout.JOB_FILE_NAMES] == [
        f"/durable/trainops/run42/job/train/{name}"
        for name in ("pid", "output.log", "exit_code", "started_at", "ended_at", "telemetry.jsonl")
    ]
    assert run_layout.cache_dir("/durable") == "/durable/cache"
    for bad in ("", ".", "..", "a/b"):
        with pytest.raises(ValueError):
            run_layout.RunLayout.for_run("/durable", bad)
        with pytest.raises(ValueError):
            layout.job_dir(bad)
    with pytest.raises(ValueError):
        layout.job_file("train", "secrets")
    assert {code: run_layout.status_for_exit(code) for code in (0, 1, 2, 75, 3, -9)} == {
        0: "finished",
        1: "failed",
        2: "refused",
        75: "interrupted",
        3: "failed",
        -9: "failed",
    }
