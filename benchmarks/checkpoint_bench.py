#!/usr/bin/env python
"""Checkpoint save/verify benchmark (not a test): the cost of integrity, measured against baselines
taken in the same run, on the same disk.

Save time, every variant durable (file fsynced before the clock stops), for 10 MB, 100 MB and 1 GB
state dicts:
  plain         torch.save(path) + fsync                           (baseline)
  plain+sha     torch.save(path) + fsync + a separate sha256 pass over the file
  unhashed      our write path (zip CRC32 off, early writeback) with the sha256 replaced by nothing
  hashed        our hash-while-write payload save + fsync           (integrity, same single write;
                torch's zip CRC32 off, as the writer does: SHA256SUMS supersedes it)
  hashed+crc    the same with torch's zip CRC32 left on             (what it would cost without that choice)
  commit        our full atomic commit: temp dir, hash-while-write, manifest, SHA256SUMS, fsyncs, rename
Verify throughput: our verifier (verify_checkpoint) vs `sha256sum` over the same files, warm page cache.
Peak memory of a save: ru_maxrss growth of a fresh process while it saves (hashing streams, so this stays
far below the checkpoint size); "buffered" (serialise to memory, hash, write) shows what a copy looks like.

Targets: hashed <= 1.15 x plain; verify >= 0.90 x sha256sum. hashed/unhashed is the pure cost of the
hash on our own write path (early writeback and CRC32-off help both equally).

Usage: .venv/bin/python benchmarks/checkpoint_bench.py [--dir DIR] [--sizes-mb 10,100,1000] [--repeats 3]
The default directory is /var/tmp (a disk, not tmpfs); the script prints the filesystem it used.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import io
import json
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch
from trainops_train import checkpoint_format
from trainops_train.checkpoint_writer import CheckpointWriter, HashingFileWriter, save_payload

ROOT = pathlib.Path(__file__).resolve().parents[1]

MB = 1_000_000
# Tensors of at most this many bytes, plus a few small ones: the shape of a real state dict.
LARGEST_TENSOR_BYTES = 16 << 20
HASH_TARGET = 1.15
VERIFY_TARGET = 0.90


def state_dict_of(size_bytes: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(size_bytes)
    state: dict[str, torch.Tensor] = {}
    remaining = size_bytes
    index = 0
    while remaining > 0:
        chunk = min(LARGEST_TENSOR_BYTES, remaining)
        state[f"layer{index}.weight"] = torch.rand(max(1, chunk // 4), generator=generator)
        state[f"layer{index}.bias"] = torch.rand(256, generator=generator)
        remaining -= chunk
        index += 1
    return state


def filesystem_of(path: str) -> str:
    """'<fstype> on <device> (mounted at <mountpoint>)' for the mount holding path."""
    best = ("?", "?", "")
    real = os.path.realpath(path)
    with open("/proc/mounts", encoding="utf-8") as mounts:
        for line in mounts:
            device, mountpoint, fstype = line.split()[:3]
            if (real == mountpoint or real.startswith(mountpoint.rstrip("/") + "/")) and len(mountpoint) >= len(
                best[2]
            ):
                best = (fstype, device, mountpoint)
    return f"{best[0]} on {best[1]} (mounted at {best[2]})"


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_plain(state: dict[str, Any], directory: str) -> float:
    path = os.path.join(directory, "plain.pt")
    started = time.perf_counter()
    torch.save(state, path)
    fsync_path(path)
    return time.perf_counter() - started


def save_plain_then_hash(state: dict[str, Any], directory: str) -> float:
    path = os.path.join(directory, "plain_sha.pt")
    started = time.perf_counter()
    torch.save(state, path)
    fsync_path(path)
    checkpoint_format.sha256_file(path)
    return time.perf_counter() - started


def save_hashed(state: dict[str, Any], directory: str, zip_crc32: bool = False) -> float:
    path = os.path.join(directory, "hashed.pt")
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        started = time.perf_counter()
        save_payload(path, state, pool, zip_crc32=zip_crc32)
        return time.perf_counter() - started


class _NoDigest:
    """Stands in for sha256 to time the same write path without hashing (isolates the hash's cost)."""

    def update(self, _data: Any) -> None:
        return None

    def hexdigest(self) -> str:
        return "0" * 64


def save_unhashed(state: dict[str, Any], directory: str) -> float:
    path = os.path.join(directory, "unhashed.pt")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        started = time.perf_counter()
        writer = HashingFileWriter(fd, pool)
        writer._digest = _NoDigest()  # benchmark only: the same path without the hash
        previous = torch.serialization.get_crc32_options()
        torch.serialization.set_crc32_options(False)
        try:
            torch.save(state, writer)
        finally:
            torch.serialization.set_crc32_options(previous)
        os.fsync(fd)
        elapsed = time.perf_counter() - started
    os.close(fd)
    return elapsed


def save_hashed_with_crc(state: dict[str, Any], directory: str) -> float:
    return save_hashed(state, directory, zip_crc32=True)


def save_buffered(state: dict[str, Any], directory: str) -> float:
    """The naive way (for the memory table only): serialise into memory, then hash and write the copy."""
    path = os.path.join(directory, "buffered.pt")
    started = time.perf_counter()
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getbuffer()
    hashlib.sha256(data).hexdigest()
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    del data
    return time.perf_counter() - started


def save_commit(state: dict[str, Any], directory: str) -> float:
    root = os.path.join(directory, "ckpt")
    writer = CheckpointWriter(root, "bench", "sha256:bench", {}, 1, keep_last=1)
    try:
        started = time.perf_counter()
        writer.commit(1, {"model.pt": state}, {})
        return time.perf_counter() - started
    finally:
        writer.close()


VARIANTS = {
    "plain": save_plain,
    "plain+sha": save_plain_then_hash,
    "unhashed": save_unhashed,
    "hashed": save_hashed,
    "hashed+crc": save_hashed_with_crc,
    "commit": save_commit,
}
MEMORY_VARIANTS = {**VARIANTS, "buffered": save_buffered}


def bench_saves(state: dict[str, Any], base: str, repeats: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for repeat in range(repeats):
        # rotate the order so no variant always runs first (or right after another's writeback)
        order = list(VARIANTS)[repeat % len(VARIANTS) :] + list(VARIANTS)[: repeat % len(VARIANTS)]
        for name in order:
            directory = tempfile.mkdtemp(prefix=f"{name.replace('+', '_')}-", dir=base)
            try:
                subprocess.run(["sync"], check=True, timeout=600)
                times[name].append(VARIANTS[name](state, directory))
            finally:
                shutil.rmtree(directory)
    return {name: statistics.median(values) for name, values in times.items()}


def bench_verify(state: dict[str, Any], base: str, repeats: int) -> dict[str, float]:
    directory = tempfile.mkdtemp(prefix="verify-", dir=base)
    try:
        root = os.path.join(directory, "ckpt")
        writer = CheckpointWriter(root, "bench", "sha256:bench", {}, 1, keep_last=1)
        saved = writer.commit(1, {"model.pt": state}, {})
        writer.close()
        files = sorted(os.listdir(saved.path))
        size = sum(os.path.getsize(os.path.join(saved.path, name)) for name in files)
        ours, theirs = [], []
        checkpoint_format.verify_checkpoint(saved.path)  # warm the page cache for both
        for _repeat in range(repeats):
            started = time.perf_counter()
            report = checkpoint_format.verify_checkpoint(saved.path)
            ours.append(time.perf_counter() - started)
            assert report.valid, report.errors
            started = time.perf_counter()
            subprocess.run(["sha256sum", *files], cwd=saved.path, check=True, capture_output=True, timeout=600)
            theirs.append(time.perf_counter() - started)
        return {
            "ours_mb_s": size / MB / statistics.median(ours),
            "sha256sum_mb_s": size / MB / statistics.median(theirs),
        }
    finally:
        shutil.rmtree(directory)


def memory_probe(variant: str, size_bytes: int, base: str) -> None:
    """Run in a fresh process: peak RSS growth while saving (printed as JSON)."""
    state = state_dict_of(size_bytes)
    directory = tempfile.mkdtemp(prefix="mem-", dir=base)
    try:
        # warm up torch.save's code paths on a tiny object, then take the high-water mark as the baseline
        torch.save({"x": torch.zeros(4)}, os.path.join(directory, "warm.pt"))
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        MEMORY_VARIANTS[variant](state, directory)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    finally:
        shutil.rmtree(directory)
    print(json.dumps({"variant": variant, "state_bytes": size_bytes, "peak_growth_bytes": after - before}))


def measure_memory(variant: str, size_bytes: int, base: str) -> int:
    completed = subprocess.run(
        [sys.executable, __file__, "--memory-probe", variant, "--size-bytes", str(size_bytes), "--dir", base],
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])["peak_growth_bytes"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/var/tmp", help="where to write (a disk, not tmpfs); default /var/tmp")
    parser.add_argument("--sizes-mb", default="10,100,1000", help="checkpoint sizes in MB (10^6 bytes)")
    parser.add_argument(
        "--repeats", type=int, default=5, help="runs per variant (x4 below 1 GB, where noise is larger)"
    )
    parser.add_argument("--memory-probe", choices=sorted(MEMORY_VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--size-bytes", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.memory_probe:
        memory_probe(args.memory_probe, args.size_bytes, args.dir)
        return 0

    base = tempfile.mkdtemp(prefix="trainops-ckpt-bench-", dir=args.dir)
    print(f"directory: {base} ({filesystem_of(base)}); cpus: {os.cpu_count()}; torch {torch.__version__}")
    print(f"every save is fsynced before its clock stops; median of {args.repeats} runs (x4 below 1 GB)\n")
    failures = []
    try:
        names = list(VARIANTS)
        rows = []
        for size_mb in (int(value) for value in args.sizes_mb.split(",")):
            state = state_dict_of(size_mb * MB)
            repeats = args.repeats * (4 if size_mb < 1000 else 1)
            saves = bench_saves(state, base, repeats)
            verify = bench_verify(state, base, repeats)
            del state
            rows.append((size_mb, saves, verify))
            print(f"{size_mb} MB: " + ", ".join(f"{name} {saves[name]:.3f} s" for name in names), flush=True)
        print("\nsave time, seconds (median):")
        print(f"{'size':>8} " + " ".join(f"{name:>11}" for name in names))
        for size_mb, saves, _verify in rows:
            print(f"{size_mb:>6}MB " + " ".join(f"{saves[name]:>11.3f}" for name in names))
        ratios = [
            ("hashed/plain", "hashed", "plain"),
            ("hashed/unhashed", "hashed", "unhashed"),
            ("hashed+crc/plain", "hashed+crc", "plain"),
            ("plain+sha/plain", "plain+sha", "plain"),
            ("commit/plain", "commit", "plain"),
        ]
        print(f"\nsave time ratios (target: hashed/plain <= {HASH_TARGET:.2f}):")
        print(f"{'size':>8} " + " ".join(f"{label:>17}" for label, _a, _b in ratios))
        for size_mb, saves, _verify in rows:
            print(f"{size_mb:>6}MB " + " ".join(f"{saves[a] / saves[b]:>17.3f}" for _label, a, b in ratios))
        print(f"\nverify throughput, warm page cache (target: ours/sha256sum >= {VERIFY_TARGET:.2f}):")
        print(f"{'size':>8} {'ours MB/s':>10} {'sha256sum MB/s':>15} {'ratio':>7}")
        for size_mb, saves, verify in rows:
            verify_ratio = verify["ours_mb_s"] / verify["sha256sum_mb_s"]
            print(f"{size_mb:>6}MB {verify['ours_mb_s']:>10.0f} {verify['sha256sum_mb_s']:>15.0f} {verify_ratio:>7.3f}")
            hashed_ratio = saves["hashed"] / saves["plain"]
            if hashed_ratio > HASH_TARGET:
                failures.append(f"{size_mb} MB: hash-while-write costs {hashed_ratio:.3f} x plain (> {HASH_TARGET})")
            if verify_ratio < VERIFY_TARGET:
                failures.append(f"{size_mb} MB: verify reaches {verify_ratio:.3f} x sha256sum (< {VERIFY_TARGET})")
        largest = max(int(value) for value in args.sizes_mb.split(",")) * MB
        print(f"\npeak memory growth of one save of a {largest / MB:.0f} MB state dict (fresh process, ru_maxrss):")
        for variant in ("plain", "hashed", "commit", "buffered"):
            growth = measure_memory(variant, largest, base)
            print(f"  {variant:>8}: {growth / MB:8.1f} MB ({growth / largest:.1%} of the checkpoint)")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print()
    if failures:
        print("targets missed:\n  " + "\n  ".join(failures))
        return 1
    print(f"targets met: hash-while-write <= {HASH_TARGET} x plain save; verify >= {VERIFY_TARGET} x sha256sum")
    return 0


if __name__ == "__main__":
    sys.exit(main())
