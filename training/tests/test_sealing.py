"""seal() and newest_sealed(): checkpoints some other code wrote (a framework's directory, a torch.save file),
sealed after the fact and found again by verification, never by name or mtime. Real files, real coreutils."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest
from trainer_harness import assert_sha256sum_accepts
from trainops_train import checkpoint_format as fmt
from trainops_train.sealing import SealError, newest_sealed, seal


def _framework_dir(root: pathlib.Path, name: str, salt: bytes = b"") -> pathlib.Path:
    """A directory the way frameworks write them: HF's flat files (what its Trainer resumes from, so the layout
    check passes), DCP's dotted and underscored names, a nested directory."""
    path = root / name
    (path / "sub").mkdir(parents=True)
    (path / "model.safetensors").write_bytes(b"weights" * 1000 + salt)
    (path / "trainer_state.json").write_text('{"global_step": 1}')
    for resumed in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        (path / resumed).write_bytes(resumed.encode() + salt)
    (path / ".metadata").write_bytes(b"dcp metadata" + salt)
    (path / "__0_0.distcp").write_bytes(os.urandom(5000))
    (path / "sub" / "epoch=0-step=3.ckpt").write_bytes(b"nested" + salt)
    return path


def _events():
    seen: list[tuple[str, dict]] = []

    def sink(name, **fields):
        seen.append((name, fields))

    return seen, sink


def _flip_byte(path: pathlib.Path, offset: int = 10) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_sealed_directory_verifies_here_and_with_coreutils(tmp_path):
    path = _framework_dir(tmp_path, "checkpoint-120")
    sealed = seal(path)
    assert (sealed.step, sealed.layout, sealed.path) == (120, "directory", str(path))
    assert set(sealed.manifest["files"]) == {
        "model.safetensors",
        "trainer_state.json",
        "optimizer.pt",
        "scheduler.pt",
        "rng_state.pth",
        ".metadata",
        "__0_0.distcp",
        "sub/epoch=0-step=3.ckpt",
    }
    assert_sha256sum_accepts(path)
    report = fmt.verify_checkpoint(str(path))
    assert report.valid and report.step == 120 and report.layout == "directory", report.errors
    assert report.framework == "transformers"
    assert not [name for name in os.listdir(path) if fmt.SEAL_TEMP_MARK in name]
    # sealing again is a no-op that returns the same checkpoint
    assert seal(path).manifest == sealed.manifest


def test_a_sealed_file_verifies_beside_it(tmp_path):
    path = tmp_path / "ckpt_7.pt"
    path.write_bytes(os.urandom(3000))
    sealed = seal(path, world_size=2, producer={"framework": "torch"}, captured={"sampler": 3})
    assert (sealed.step, sealed.layout) == (7, "file")
    assert sorted(os.listdir(tmp_path)) == ["ckpt_7.pt", "ckpt_7.pt.SHA256SUMS", "ckpt_7.pt.trainops-seal.json"]
    completed = subprocess.run(
        ["sha256sum", "--check", "--strict", "ckpt_7.pt.SHA256SUMS"], cwd=tmp_path, capture_output=True, check=False
    )
    assert completed.returncode == 0, completed
    report = fmt.verify_checkpoint(str(path))
    assert report.valid and report.to_dict()["world_size"] == 2, report.errors
    manifest = json.loads((tmp_path / "ckpt_7.pt.trainops-seal.json").read_text())
    assert manifest["captured"] == {"sampler": 3} and manifest["kind"] == "file"


def test_seal_refuses_what_it_cannot_vouch_for(tmp_path):
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"not part of the checkpoint")
    linked = _framework_dir(tmp_path, "checkpoint-5")
    (linked / "escape.bin").symlink_to(outside)
    with pytest.raises(SealError, match=r"escape\.bin: is a symbolic link"):
        seal(linked)
    assert not (linked / fmt.SUMS_NAME).exists() and not (linked / fmt.SEAL_NAME).exists()
    (tmp_path / "empty-3").mkdir()
    with pytest.raises(SealError, match="empty directory"):
        seal(tmp_path / "empty-3")
    with pytest.raises(SealError, match="does not exist"):
        seal(tmp_path / "missing-4")
    (tmp_path / "nostep").mkdir()
    (tmp_path / "nostep" / "a.pt").write_bytes(b"a")
    with pytest.raises(SealError, match="give step="):
        seal(tmp_path / "nostep")
    (tmp_path / "link-9").symlink_to(outside)
    with pytest.raises(SealError, match="symbolic link"):
        seal(tmp_path / "link-9")
    # a sealed checkpoint changed afterwards is never sealed again over the change
    changed = _framework_dir(tmp_path, "checkpoint-6")
    seal(changed)
    _flip_byte(changed / "model.safetensors")
    with pytest.raises(SealError, match=r"does not verify: model\.safetensors: sha256 mismatch"):
        seal(changed)


@pytest.mark.parametrize(
    ("damage", "error"),
    [
        ("flip", "model.safetensors: sha256 mismatch"),
        ("missing", "model.safetensors: missing or not a regular file"),
        ("torn", "SHA256SUMS missing: the seal did not finish (torn seal)"),
        ("truncated_sums", "SHA256SUMS unreadable"),
        ("unlisted", "unlisted file 'extra.bin'"),
        ("symlink_out", "sub/epoch=0-step=3.ckpt: is a symbolic link or not a regular file"),
        ("never_sealed", "SHA256SUMS missing: not sealed"),
    ],
)
def test_newest_sealed_falls_back_past_a_damaged_checkpoint_and_moves_it_aside(tmp_path, damage, error):
    root = tmp_path / "ckpt"
    older = _framework_dir(root, "checkpoint-10", b"old")
    seal(older)
    newer = _framework_dir(root, "checkpoint-20", b"new")
    if damage != "never_sealed":
        seal(newer)
    if damage == "flip":
        _flip_byte(newer / "model.safetensors")
    elif damage == "missing":
        (newer / "model.safetensors").unlink()
    elif damage == "torn":
        (newer / fmt.SUMS_NAME).unlink()
    elif damage == "truncated_sums":
        sums = newer / fmt.SUMS_NAME
        sums.write_bytes(sums.read_bytes()[:50])
    elif damage == "unlisted":
        (newer / "extra.bin").write_bytes(b"x")
    elif damage == "symlink_out":
        target = newer / "sub" / "epoch=0-step=3.ckpt"
        target.unlink()
        target.symlink_to(tmp_path / "elsewhere")
    report = fmt.verify_checkpoint(str(newer))
    assert not report.valid and any(error in problem for problem in report.errors), report.errors

    seen, sink = _events()
    found = newest_sealed(root, on_event=sink)
    assert found is not None and found.path == str(older) and found.step == 10
    aside = [name for name in os.listdir(root) if name.startswith("checkpoint-20.")]
    kind = "unsealed" if damage == "never_sealed" else "corrupt"
    assert len(aside) == 1 and fmt.parse_aside_dirname(aside[0]) == ("checkpoint-20", kind), aside
    assert not newer.exists() and (root / aside[0] / "trainer_state.json").exists()  # moved, never deleted
    assert [name for name, _fields in seen] == ["aside"] and seen[0][1]["was"] == str(newer)
    assert seen[0][1]["path"] == str(root / aside[0]) and seen[0][1]["step"] == 20
    # the next call finds the same, with nothing left to move
    seen.clear()
    assert newest_sealed(root, on_event=sink).path == str(older) and seen == []


def test_a_damaged_sealed_file_goes_aside_with_its_seal(tmp_path):
    root = tmp_path / "ckpt"
    root.mkdir()
    for step in (3, 6):
        (root / f"step-{step}.pt").write_bytes(os.urandom(2000))
        seal(root / f"step-{step}.pt")
    _flip_byte(root / "step-6.pt")
    found = newest_sealed(root, on_event=_events()[1])
    assert found.path == str(root / "step-3.pt") and found.layout == "file"
    names = sorted(os.listdir(root))
    assert sorted(fmt.parse_aside_dirname(name) for name in names if "corrupt" in name) == [
        ("step-6.pt", "corrupt"),
        ("step-6.pt.SHA256SUMS", "corrupt"),
        ("step-6.pt.trainops-seal.json", "corrupt"),
    ]
    # a seal whose file is gone: the checkpoint is named missing, its sidecars go aside
    (root / "step-3.pt").unlink()
    seen, sink = _events()
    assert newest_sealed(root, on_event=sink) is None
    assert seen[0][1]["reason"] == "step-3.pt: missing or not a regular file"
    assert not [name for name in os.listdir(root) if name.startswith("step-3.pt") and "corrupt" not in name]


def test_newest_is_by_the_sealed_step_never_by_name_or_mtime(tmp_path):
    root = tmp_path / "ckpt"
    nine = _framework_dir(root, "checkpoint-9")
    ten = _framework_dir(root, "checkpoint-10")
    seal(ten)
    seal(nine)
    os.utime(nine, (2_000_000_000, 2_000_000_000))  # the newest mtime, and "9" sorts after "10" by name
    assert newest_sealed(root).path == str(ten)
    # a name that says one step and a seal that says another: the seal decides
    other = _framework_dir(root, "final")
    seal(other, step=11)
    assert newest_sealed(root).step == 11


def test_unsealed_entries_older_than_the_choice_stay_and_are_named(tmp_path):
    root = tmp_path / "ckpt"
    seal(_framework_dir(root, "checkpoint-30"))
    _framework_dir(root, "checkpoint-20")  # older, never sealed: left in place
    (root / "model-10.pt").write_bytes(b"older, never sealed")
    (root / "last.ckpt").symlink_to(root / "checkpoint-30")  # a framework's "last" link: never followed
    # files that are no checkpoint, whatever numbers their names hold, are none of newest_sealed's business
    (root / "zero_to_fp32.py").write_text("# a helper script")
    (root / "events.out.tfevents.1700000000.host").write_bytes(b"tensorboard")
    seen, sink = _events()
    assert newest_sealed(root, on_event=sink).step == 30
    assert (root / "checkpoint-20").is_dir() and (root / "last.ckpt").is_symlink()
    assert (root / "zero_to_fp32.py").is_file() and (root / "events.out.tfevents.1700000000.host").is_file()
    assert sorted((fields["path"].rsplit("/", 1)[1], fields["reason"]) for _name, fields in seen) == [
        ("checkpoint-20", "not sealed: no SHA256SUMS"),
        ("last.ckpt", "not sealed: a symbolic link"),
        ("model-10.pt", "not sealed: no model-10.pt.SHA256SUMS"),
    ]
    report = fmt.verify_root(str(root)).to_dict()
    assert report["newest_valid_step"] == 30 and len(report["unsealed"]) == 3
    # with nothing valid, a newer unsealed checkpoint file goes aside; the helper script with a 32 stays
    (root / "model-99.pt").write_bytes(b"never sealed")
    newest_sealed(root)
    assert not (root / "model-99.pt").exists() and (root / "zero_to_fp32.py").is_file()


def test_a_sealed_file_named_like_a_step_directory_is_listed_once(tmp_path):
    root = tmp_path / "ckpt"
    root.mkdir()
    for name in (fmt.step_dirname(120), "step-3"):
        (root / name).write_bytes(os.urandom(100))
        seal(root / name, step=120 if name.endswith("120") else 3)
    report = fmt.verify_root(str(root)).to_dict()
    assert [(c["path"].rsplit("/", 1)[1], c["valid"]) for c in report["checkpoints"]] == [
        (fmt.step_dirname(120), True),
        ("step-3", True),
    ], report["checkpoints"]
    assert newest_sealed(root).layout == "file"


def test_move_aside_false_only_names_what_it_passes_over(tmp_path):
    root = tmp_path / "ckpt"
    seal(_framework_dir(root, "checkpoint-1"))
    newer = _framework_dir(root, "checkpoint-2")
    seen, sink = _events()
    assert newest_sealed(root, move_aside=False, on_event=sink).step == 1
    assert newer.is_dir() and [name for name, _fields in seen] == ["passed_over"]


def test_a_torn_seal_is_redone_by_sealing_again(tmp_path):
    path = _framework_dir(tmp_path, "checkpoint-4")
    seal(path)
    (path / fmt.SUMS_NAME).unlink()  # died after the manifest, before SHA256SUMS was renamed into place
    (path / f"{fmt.SUMS_NAME}{fmt.SEAL_TEMP_MARK}123-ab").write_bytes(b"half")
    assert not fmt.verify_checkpoint(str(path)).valid
    assert seal(path).step == 4
    assert fmt.verify_checkpoint(str(path)).valid and not [n for n in os.listdir(path) if fmt.SEAL_TEMP_MARK in n]


def test_native_and_sealed_checkpoints_share_one_root(tmp_path):
    """The reference trainer's step-N/ directories and sealed ones are ordered together by step."""
    root = tmp_path / "ckpt"
    native = root / fmt.step_dirname(50)
    native.mkdir(parents=True)
    (native / "model.pt").write_bytes(b"m")
    files = {"model.pt": {"size": 1, "sha256": fmt.hashlib.sha256(b"m").hexdigest()}}
    manifest = fmt.build_manifest(50, "run", "sha256:" + "0" * 64, {}, 1, {}, files, None, None)
    raw = fmt.manifest_bytes(manifest)
    (native / fmt.MANIFEST_NAME).write_bytes(raw)
    sums = {"model.pt": files["model.pt"]["sha256"], fmt.MANIFEST_NAME: fmt.hashlib.sha256(raw).hexdigest()}
    (native / fmt.SUMS_NAME).write_text(fmt.format_sums(sums))
    assert newest_sealed(root).layout == "native"
    seal(_framework_dir(root, "checkpoint-60"))
    assert newest_sealed(root).step == 60
    assert [c["layout"] for c in fmt.verify_root(str(root)).to_dict()["checkpoints"]] == ["directory", "native"]


def test_the_transformers_layout_accepts_each_form_the_trainer_resumes_from():
    def read(name):
        return b'{"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}'

    base = {"trainer_state.json", "rng_state.pth"}
    check = fmt.transformers_layout_errors
    assert check(base | {"model.safetensors", "optimizer.pt", "scheduler.pt"}, read) == []
    assert check(base | {"adapter_model.safetensors", "optimizer.bin", "scheduler.pt"}, read) == []
    assert check(base | {"pytorch_model_fsdp_0/__0_0.distcp", "optimizer_0/__0_0.distcp", "scheduler.pt"}, read) == []
    assert check(base | {"global_step40/mp_rank_00_model_states.pt"}, read) == []  # DeepSpeed's folder holds it all
    sharded = base | {"model.safetensors.index.json", "model-00001-of-00002.safetensors", "optimizer.pt"}
    assert check(sharded, read) == [
        "model-00002-of-00002.safetensors missing: model.safetensors.index.json names it",
        "scheduler.pt missing: the Trainer resumes from it (saved with save_only_model?)",
    ]
    assert check({"trainer_state.json"}, read) == [
        "model.safetensors missing (nor an index of shards): a transformers checkpoint without weights",
        "optimizer.pt missing: the Trainer resumes from it (saved with save_only_model?)",
        "scheduler.pt missing: the Trainer resumes from it (saved with save_only_model?)",
        "rng_state.pth missing: the Trainer restores the RNG from it",
    ]
