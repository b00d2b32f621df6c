# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A job's telemetry as the bench report gives it: the samples' summary and the GPUs nvidia-smi listed.

The samples are the lines of a job's telemetry.jsonl (module_utils/_job_supervisor.py writes them): elapsed_s,
rss_bytes, gpus [{index, memory_used_mib, ...}] and gpu_error where nvidia-smi failed.
"""

from __future__ import annotations

import itertools
import json


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def samples_of(text: str) -> list:
    """The samples of a telemetry.jsonl's text; a line that is not a JSON object (a torn last line) is skipped."""
    samples = []
    for line in (text or "").splitlines():
        try:
            sample = json.loads(line)
        except ValueError:
            continue
        if isinstance(sample, dict):
            samples.append(sample)
    return samples


def _median(values: list):
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return None
    middle = n // 2
    return ordered[middle] if n % 2 else round((ordered[middle - 1] + ordered[middle]) / 2, 3)


def summary(samples: list, interval_s: float) -> dict:
    """Sample count, spacing of consecutive samples (median, min, max), peak GPU memory per GPU index (keys are
    the indexes as strings), samples with a GPU error, and the peak RSS of the job's processes."""
    gaps = [
        round(later["elapsed_s"] - earlier["elapsed_s"], 3)
        for earlier, later in itertools.pairwise(samples)
        if _is_number(earlier.get("elapsed_s")) and _is_number(later.get("elapsed_s"))
    ]
    rss = [s["rss_bytes"] for s in samples if _is_number(s.get("rss_bytes"))]
    peak_gpu: dict = {}
    for sample in samples:
        for gpu in sample.get("gpus") or []:
            used = gpu.get("memory_used_mib") if isinstance(gpu, dict) else None
            if _is_number(used):
                key = str(gpu.get("index"))
                peak_gpu[key] = max(peak_gpu.get(key, used), used)
    return {
        "samples": len(samples),
        "interval_s": float(interval_s),
        "spacing_s": {"median": _median(gaps), "min": min(gaps, default=None), "max": max(gaps, default=None)},
        "peak_gpu_memory_mib": peak_gpu or None,
        "samples_with_gpu_error": sum(1 for s in samples if "gpu_error" in s),
        "peak_rss_bytes": max(rss, default=None),
    }


def gpus_listed(csv_text: str) -> list:
    """[{index, name, memory_total_mib}] from `nvidia-smi --query-gpu=index,name,memory.total
    --format=csv,noheader,nounits`; a line without a numeric index is skipped."""
    gpus = []
    for line in (csv_text or "").splitlines():
        fields = [field.strip() for field in line.split(",")]
        if not fields[0].isdigit():
            continue
        total = fields[2] if len(fields) > 2 else ""
        gpus.append(
            {
                "index": int(fields[0]),
                "name": fields[1] if len(fields) > 1 else "",
                "memory_total_mib": int(total) if total.isdigit() else 0,
            }
        )
    return gpus
