"""Corruption: each damage done to the newest checkpoint the real trainer wrote is detected by the
checkpoint_verify module (really run by ansible-playbook) and by the trainer, which falls back to the
previous checkpoint, moves the damaged one aside and still ends identical to the reference run."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import sys

import pytest
import torch
from trainer_harness import (
    events,
    journal,
    process_log,
    result,
    run_local_playbook,
    run_trainer,
    write_config,
)
from trainops_train import checkpoint_format, resume
from trainops_train.sealing import seal

CONFIG = {"steps": 120, "checkpoint": {"every_steps": 20, "keep_last": 3}}
NEWEST = checkpoint_format.step_dirname(120)
PREVIOUS_STEP = 100


def _rewrite_sums_and_manifest(directory: pathlib.Path, mutate_manifest=None) -> None:
    """Re-hash a checkpoint after its payload changed, so it is self-consistent (as if written so)."""
    manifest = json.loads((directory / checkpoint_format.MANIFEST_NAME).read_text())
    hashes = {}
    for name in manifest["files"]:
        digest, size = checkpoint_format.sha256_file(str(directory / name))
        manifest["files"][name] = {"size": size, "sha256": digest}
        hashes[name] = digest
    if mutate_manifest:
        mutate_manifest(manifest)
    data = checkpoint_format.manifest_bytes(manifest)
    (directory / checkpoint_format.MANIFEST_NAME).write_bytes(data)
    hashes[checkpoint_format.MANIFEST_NAME] = hashlib.sha256(data).hexdigest()
    (directory / checkpoint_format.SUMS_NAME).write_text(checkpoint_format.format_sums(hashes))


def flipped_byte(ckpt: pathlib.Path) -> pathlib.Path:
    path = ckpt / NEWEST / "model.pt"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    return ckpt / NEWEST


def truncated_file(ckpt: pathlib.Path) -> pathlib.Path:
    path = ckpt / NEWEST / "optim.pt"
    os.truncate(path, path.stat().st_size // 2)
    return ckpt / NEWEST


def missing_sums(ckpt: pathlib.Path) -> pathlib.Path:
    (ckpt / NEWEST / checkpoint_format.SUMS_NAME).unlink()
    return ckpt / NEWEST


def missing_manifest(ckpt: pathlib.Path) -> pathlib.Path:
    (ckpt / NEWEST / checkpoint_format.MANIFEST_NAME).unlink()
    return ckpt / NEWEST


def empty_directory(ckpt: pathlib.Path) -> pathlib.Path:
    for entry in (ckpt / NEWEST).iterdir():
        entry.unlink()
    return ckpt / NEWEST


def stray_temp_directory(ckpt: pathlib.Path) -> pathlib.Path:
    """What a save killed before its commit leaves: a temporary directory, no step-N."""
    temp = ckpt / checkpoint_format.temp_dirname(120, 4242, "beef")
    (ckpt / NEWEST).rename(temp)
    (temp / checkpoint_format.SUMS_NAME).unlink()
    (ckpt / checkpoint_format.LATEST_NAME).write_text(NEWEST + "\n")
    return temp


def unloadable_payload(ckpt: pathlib.Path) -> pathlib.Path:
    """Hashes and manifest consistent, but model.pt is not a torch file: only loading finds it."""
    (ckpt / NEWEST / "model.pt").write_bytes(b"PK\x03\x04 this is not a torch checkpoint" * 50)
    _rewrite_sums_and_manifest(ckpt / NEWEST)
    return ckpt / NEWEST


def broken_chain(ckpt: pathlib.Path) -> pathlib.Path:
    """Self-consistent, but its manifest does not chain to the predecessor present next to it."""
    _rewrite_sums_and_manifest(ckpt / NEWEST, lambda m: m.update(previous_manifest_sha256="0" * 64))
    return ckpt / NEWEST


# case -> (damage, what the verifier must say about it, whether only loading detects it)
CASES = {
    "flipped_byte": (flipped_byte, "model.pt: sha256 mismatch", False),
    "truncated_file": (truncated_file, "optim.pt: size", False),
    "missing_sums": (missing_sums, "SHA256SUMS missing", False),
    "missing_manifest": (missing_manifest, "manifest.json missing", False),
    "empty_directory": (empty_directory, "empty directory", False),
    "stray_temp_directory": (stray_temp_directory, None, False),
    "unloadable_payload": (unloadable_payload, "model.pt: load failed", True),
    "broken_chain": (broken_chain, "manifest chain broken", False),
}


@pytest.fixture(scope="module")
def pristine(reference_runs) -> pathlib.Path:
    return reference_runs(1, **CONFIG)


def _damaged_copy(pristine: pathlib.Path, directory: pathlib.Path, case: str) -> tuple[pathlib.Path, pathlib.Path]:
    run_dir = directory / case
    shutil.copytree(pristine, run_dir)
    damaged = CASES[case][0](run_dir / "ckpt")
    return run_dir, damaged


PLAYBOOK = """
- name: Run checkpoint_verify over damaged checkpoint roots
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Verify each root
      trainops.gpu.checkpoint_verify:
        path: "{{ item.path }}"
        load: "{{ item.load }}"
      loop: "{{ cases }}"
      register: verified
    - name: Verify one checkpoint directory directly, and a run directory (standing for its ckpt/)
      trainops.gpu.checkpoint_verify:
        path: "{{ item }}"
      loop: "{{ single }}"
      register: single_verified
    - name: Quarantine in check mode
      trainops.gpu.checkpoint_verify:
        path: "{{ quarantine_root }}"
        quarantine: true
      check_mode: true
      register: quarantine_check
    - name: Quarantine
      trainops.gpu.checkpoint_verify:
        path: "{{ quarantine_root }}"
        quarantine: true
      register: quarantine_real
    - name: Quarantine again (nothing left to move)
      trainops.gpu.checkpoint_verify:
        path: "{{ quarantine_root }}"
        quarantine: true
        require_valid: true
      register: quarantine_again
    - name: Quarantine while a trainer holds the root is refused
      trainops.gpu.checkpoint_verify:
        path: "{{ locked_root }}"
        quarantine: true
      register: quarantine_locked
      ignore_errors: true
    - name: Require a valid checkpoint where there is none
      trainops.gpu.checkpoint_verify:
        path: "{{ empty_root }}"
        require_valid: true
      register: none_valid
      ignore_errors: true
    - name: A load that hangs is killed after load_timeout and fails the module
      trainops.gpu.checkpoint_verify:
        path: "{{ quarantine_root }}"
        load: true
        load_timeout: 1
        python: "{{ hanging_python }}"
      register: load_hangs
      ignore_errors: true
    - name: A load killed before its deadline (as by the OOM killer) fails, and is not called a timeout
      trainops.gpu.checkpoint_verify:
        path: "{{ quarantine_root }}"
        load: true
        load_timeout: 60
        python: "{{ killed_python }}"
      register: load_killed
      ignore_errors: true
    - name: Loading with an interpreter that has no torch fails with a clear message
      trainops.gpu.checkpoint_verify:
        path: "{{ quarantine_root }}"
        load: true
        python: "{{ python_without_torch }}"
      register: no_torch
      ignore_errors: true
    - name: A FIFO latest, a linked step, an odd spelling and a 1 TiB sparse file fail it within verify_timeout
      trainops.gpu.checkpoint_verify:
        path: "{{ hostile_root }}"
        verify_timeout: 2
      register: hostile
      ignore_errors: true
    - name: Write what the module returned
      ansible.builtin.copy:
        content: "{{ {'verified': verified.results, 'single': single_verified.results,
                      'quarantine_check': quarantine_check, 'quarantine_real': quarantine_real,
                      'quarantine_again': quarantine_again, 'quarantine_locked': quarantine_locked,
                      'none_valid': none_valid, 'hostile': hostile,
                      'load_hangs': load_hangs, 'load_killed': load_killed, 'no_torch': no_torch} | to_json }}"
        dest: "{{ out }}"
        mode: "0644"
"""


def _stand_in_interpreters(directory: pathlib.Path) -> dict[str, str]:
    """Stand-ins for a target's interpreter: one that never answers, one killed at once, one without torch."""
    scripts = {
        "hanging_python": "#!/bin/sh\nexec sleep 60\n",
        "killed_python": "#!/bin/sh\nkill -9 $$\n",
        "python_without_torch": f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n',
    }
    paths = {}
    for name, script in scripts.items():
        path = directory / name.replace("_", "-")
        path.write_text(script)
        path.chmod(0o755)
        paths[name] = str(path)
    return paths


def _damaged_roots(tmp_path: pathlib.Path, pristine: pathlib.Path) -> dict[str, pathlib.Path]:
    """One damaged copy per case, and the roots of the quarantine, lock and failure tasks."""
    roots = {case: _damaged_copy(pristine, tmp_path, case)[0] / "ckpt" for case in CASES}
    for name in ("quarantine", "locked"):
        shutil.copytree(pristine, tmp_path / name)
        flipped_byte(tmp_path / name / "ckpt")
        roots[name] = tmp_path / name / "ckpt"
    # what a trainer killed while pruning leaves: reported as deleting, never valid, never moved
    roots["deleting"] = roots["quarantine"] / checkpoint_format.deleting_dirname(60, "ab12")
    shutil.copytree(pristine / "ckpt" / checkpoint_format.step_dirname(PREVIOUS_STEP), roots["deleting"])
    roots["empty"] = tmp_path / "empty_root"
    roots["empty"].mkdir()
    roots["hostile"] = _hostile_root(tmp_path, pristine)
    return roots


def _hostile_root(tmp_path: pathlib.Path, pristine: pathlib.Path) -> pathlib.Path:
    """A root built to hang or fool a verifier: `latest` is a FIFO, step 130 is a symbolic link to a valid
    checkpoint elsewhere, step-000000120 spells step 120 with 9 digits, and step 120's optim.pt is a 1 TiB
    sparse file listed at that size (self-consistent manifest and SHA256SUMS, so only hashing could tell)."""
    ckpt = tmp_path / "hostile" / "ckpt"
    shutil.copytree(pristine / "ckpt", ckpt)
    (ckpt / checkpoint_format.LATEST_NAME).unlink()
    os.mkfifo(ckpt / checkpoint_format.LATEST_NAME)
    (ckpt / checkpoint_format.step_dirname(130)).symlink_to(pristine / "ckpt" / NEWEST)
    shutil.copytree(pristine / "ckpt" / NEWEST, ckpt / "step-000000120")
    newest = ckpt / NEWEST
    os.truncate(newest / "optim.pt", 1 << 40)
    manifest = json.loads((newest / checkpoint_format.MANIFEST_NAME).read_text())
    manifest["files"]["optim.pt"]["size"] = 1 << 40
    data = checkpoint_format.manifest_bytes(manifest)
    (newest / checkpoint_format.MANIFEST_NAME).write_bytes(data)
    sums = checkpoint_format.parse_sums((newest / checkpoint_format.SUMS_NAME).read_text())
    sums[checkpoint_format.MANIFEST_NAME] = hashlib.sha256(data).hexdigest()
    (newest / checkpoint_format.SUMS_NAME).write_text(checkpoint_format.format_sums(sums))
    return ckpt


def _check_hostile(hostile: dict, root: pathlib.Path) -> None:
    assert hostile["failed"] is True and "timed out after 2 seconds (verify_timeout)" in hostile["msg"], hostile
    assert hostile["timed_out"] == str(root / NEWEST) and hostile["latest_hint"] is None
    assert hostile["unverified"] == [str(root / checkpoint_format.step_dirname(s)) for s in (100, 80)]
    corrupt = {entry["path"]: entry["errors"] for entry in hostile["corrupt"]}
    assert corrupt == {
        str(root / checkpoint_format.step_dirname(130)): ["is a symbolic link"],
        str(root / "step-000000120"): ["non-canonical name: step 120 is spelled step-00000120"],
    }, corrupt
    assert hostile["newest_valid_step"] is None and hostile["changed"] is False


def _run_verify_playbook(tmp_path: pathlib.Path, extra: dict, locked_root: pathlib.Path) -> dict:
    """Run PLAYBOOK with `extra` as its variables while this process holds locked_root's writer lock (as a
    running trainer would); returns what the module returned to each task."""
    # the "target host" is this machine; its Python has torch (needed for load: true)
    variables = {**extra, "ansible_python_interpreter": sys.executable}
    lock_fd = resume.lock_root(str(locked_root))
    try:
        return run_local_playbook(tmp_path, "verify", PLAYBOOK, variables)
    finally:
        os.close(lock_fd)


def _check_damage_cases(verified: list[dict], roots: dict[str, pathlib.Path]) -> None:
    for case, returned in zip(CASES, verified, strict=True):
        expected_error = CASES[case][1]
        assert returned["kind"] == "root", case
        assert returned["valid"] is True and returned["changed"] is False, case
        assert returned["newest_valid_step"] == PREVIOUS_STEP, (case, returned["corrupt"])
        assert returned["newest_valid_path"] == str(roots[case] / checkpoint_format.step_dirname(PREVIOUS_STEP))
        assert returned["deleting"] == [] and returned["unverified"] == [], case
        if expected_error is None:  # the stray temporary directory: reported, not a checkpoint
            assert returned["corrupt"] == [], case
            assert returned["stray_temp"] == [str(roots[case] / checkpoint_format.temp_dirname(120, 4242, "beef"))]
            assert returned["latest_hint"] == NEWEST  # a hint naming a checkpoint that does not exist
        else:
            assert [c["step"] for c in returned["corrupt"]] == [120], (case, returned["corrupt"])
            assert any(expected_error in error for error in returned["corrupt"][0]["errors"]), (case, returned)
        if CASES[case][2] or case == "flipped_byte":
            assert returned["loaded"]["ok"] is True and returned["loaded"]["path"] == returned["newest_valid_path"]
        # nothing was moved: verification alone changes nothing
        assert (roots[case] / NEWEST).exists() or case == "stray_temp_directory"


def _check_quarantine(out: dict, roots: dict[str, pathlib.Path]) -> None:
    quarantine_root, locked_root = roots["quarantine"], roots["locked"]
    check, real, again = out["quarantine_check"], out["quarantine_real"], out["quarantine_again"]
    assert check["changed"] is True and check["quarantined"][0]["path"] == str(quarantine_root / NEWEST)
    assert real["changed"] is True and len(real["quarantined"]) == 1
    assert real["deleting"] == [str(roots["deleting"])] and real["unverified"] == []
    moved_to = pathlib.Path(real["quarantined"][0]["moved_to"])
    assert checkpoint_format.parse_aside_dirname(moved_to.name) == (NEWEST, checkpoint_format.ASIDE_CORRUPT)
    assert moved_to.is_dir() and not (quarantine_root / NEWEST).exists()  # moved aside, not deleted
    assert again["changed"] is False and again["quarantined"] == [] and str(moved_to) in again["aside"]
    assert roots["deleting"].is_dir()  # reported, not moved
    locked = out["quarantine_locked"]
    assert locked["failed"] is True and "quarantine refused: a trainer holds" in locked["msg"], locked
    assert str(locked_root / checkpoint_format.WRITER_LOCK_NAME) in locked["msg"] and (locked_root / NEWEST).is_dir()


@pytest.mark.slow
def test_checkpoint_verify_module_detects_every_damage(tmp_path, pristine):
    roots = _damaged_roots(tmp_path, pristine)
    interpreters = _stand_in_interpreters(tmp_path)
    extra = {
        "cases": [{"path": str(roots[case]), "load": CASES[case][2] or case == "flipped_byte"} for case in CASES],
        "single": [str(pristine / "ckpt" / NEWEST), str(roots["truncated_file"] / NEWEST), str(pristine)],
        "quarantine_root": str(roots["quarantine"]),
        "locked_root": str(roots["locked"]),
        "empty_root": str(roots["empty"]),
        "hostile_root": str(roots["hostile"]),
        **interpreters,
    }
    out = _run_verify_playbook(tmp_path, extra, roots["locked"])

    _check_damage_cases(out["verified"], roots)
    good, bad, run = out["single"]
    assert good["kind"] == "checkpoint" and good["valid"] and good["newest_valid_step"] == 120
    assert bad["kind"] == "checkpoint" and not bad["valid"] and bad["newest_valid_step"] is None
    assert run["kind"] == "root" and run["path"] == str(pristine / "ckpt") and run["newest_valid_step"] == 120
    _check_quarantine(out, roots)
    assert out["none_valid"]["failed"] is True and "no valid checkpoint" in out["none_valid"]["msg"]
    _check_hostile(out["hostile"], roots["hostile"])
    assert out["load_hangs"]["failed"] is True and "timed out after 1 seconds" in out["load_hangs"]["msg"]
    killed = out["load_killed"]
    assert killed["failed"] is True and "timed out" not in killed["msg"], killed["msg"]
    assert f"with {interpreters['killed_python']} was killed by signal 9" in killed["msg"], killed["msg"]
    assert out["no_torch"]["failed"] is True and "cannot import it" in out["no_torch"]["msg"]


@pytest.mark.parametrize("case", list(CASES))
def test_trainer_falls_back_past_damage(tmp_path, pristine, case):
    run_dir, damaged = _damaged_copy(pristine, tmp_path, case)
    config = write_config(tmp_path, **CONFIG)
    rc = run_trainer(config, run_dir)
    assert rc == 0, process_log(run_dir)
    log = events(run_dir)
    resumed = [event for event in log if event["event"] == "resume"]
    assert resumed[-1]["step"] == PREVIOUS_STEP, resumed
    aside = [event for event in log if event["event"] == "aside"]
    assert len(aside) == 1, aside
    moved = pathlib.Path(aside[0]["path"])
    kind = checkpoint_format.ASIDE_PARTIAL if case == "stray_temp_directory" else checkpoint_format.ASIDE_CORRUPT
    assert checkpoint_format.parse_aside_dirname(moved.name) == (damaged.name.lstrip("."), kind)
    # moved aside, not deleted; (a new step-120 is written again by the resumed run)
    assert moved.is_dir() and (case != "stray_temp_directory" or not damaged.exists())
    if CASES[case][1] is not None:
        assert CASES[case][1].split(":")[0] in aside[0]["reason"], aside
    # the fallback recomputed the lost steps exactly
    assert journal(run_dir) == journal(pristine)
    assert result(run_dir)["weights_sha256"] == result(pristine)["weights_sha256"]
    report = checkpoint_format.verify_root(str(run_dir / "ckpt"))
    assert report.newest_valid is not None and report.newest_valid.step == 120 and not report.corrupt


SEALED_PLAYBOOK = """
- name: checkpoint_verify over sealed and unsealed checkpoints
  hosts: localhost
  gather_facts: false
  tasks:
    - name: A framework's directory never sealed, named as the one checkpoint pulled
      trainops.gpu.checkpoint_verify: {path: "{{ unsealed_dir }}", kind: checkpoint}
      register: unsealed_one
    - name: A sealed torch.save file, loaded
      trainops.gpu.checkpoint_verify: {path: "{{ sealed_file }}", load: true}
      register: sealed_file_one
    - name: The root, with its corrupt sealed file quarantined
      trainops.gpu.checkpoint_verify: {path: "{{ root }}", quarantine: true}
      register: root_report
    - name: Write what each returned
      ansible.builtin.copy:
        content: "{{ {'unsealed': unsealed_one, 'file': sealed_file_one, 'root': root_report} | to_json }}"
        dest: "{{ out }}"
        mode: "0644"
"""


def test_checkpoint_verify_knows_sealed_checkpoints_and_names_unsealed_ones(tmp_path):
    root = tmp_path / "ckpt"
    root.mkdir()
    torch.save({"w": torch.arange(4.0)}, root / "step-10.pt")
    seal(root / "step-10.pt")
    torch.save({"w": torch.arange(5.0)}, root / "step-20.pt")
    seal(root / "step-20.pt")
    data = bytearray((root / "step-20.pt").read_bytes())
    data[len(data) // 2] ^= 0x01  # a flipped bit
    (root / "step-20.pt").write_bytes(bytes(data))
    unsealed = root / "checkpoint-30"
    unsealed.mkdir()
    (unsealed / "model.safetensors").write_bytes(b"weights")
    variables = {
        "unsealed_dir": str(unsealed),
        "sealed_file": str(root / "step-10.pt"),
        "root": str(root),
        "ansible_python_interpreter": sys.executable,
    }
    out = run_local_playbook(tmp_path, "sealed", SEALED_PLAYBOOK, variables)
    [one] = out["unsealed"]["checkpoints"]
    assert out["unsealed"]["kind"] == "checkpoint" and not one["valid"], one
    assert one["errors"] == ["SHA256SUMS missing: not sealed"], one
    sealed = out["file"]
    assert sealed["valid"] and sealed["checkpoints"][0]["layout"] == "file", sealed
    assert sealed["loaded"]["ok"] and sealed["loaded"]["files"] == 1, sealed["loaded"]
    report = out["root"]
    assert report["newest_valid_step"] == 10 and [c["step"] for c in report["corrupt"]] == [20], report
    assert report["unsealed"] == [{"path": str(unsealed), "step": 30, "why": "no SHA256SUMS"}], report
    assert report["quarantined"][0]["path"] == str(root / "step-20.pt"), report["quarantined"]
    left = sorted(os.listdir(root))
    assert not [name for name in left if name.startswith("step-20.pt") and ".corrupt-" not in name], left
    assert len([name for name in left if name.startswith("step-20.pt") and ".corrupt-" in name]) == 3, left
