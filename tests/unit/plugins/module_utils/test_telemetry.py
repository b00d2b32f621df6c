# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The bench report's telemetry summary and the GPUs nvidia-smi lists."""

from __future__ import annotations

import json

from ansible_collections.trainops.gpu.plugins.module_utils._telemetry import gpus_listed, samples_of, summary


def jsonl(*samples) -> str:
    return "".join(json.dumps(s) + "\n" for s in samples)


def gpu(index: int, used_mib: int) -> dict:
    return {"index": index, "memory_used_mib": used_mib}


def test_summary_gives_spacing_peaks_and_gpu_errors():
    text = (
        jsonl(
            {"elapsed_s": 0.0, "rss_bytes": 100, "gpus": [gpu(0, 10), gpu(1, 5)]},
            {"elapsed_s": 3.0, "rss_bytes": 300, "gpus": [gpu(0, 40), gpu(1, 2)]},
            {"elapsed_s": 7.5, "rss_bytes": 200, "gpu_error": "nvidia-smi exited 9"},
            {"elapsed_s": 10.5, "rss_bytes": None},
        )
        + '{"elapsed_s": 1'
    )  # a torn last line
    got = summary(samples_of(text), 3)
    assert got == {
        "samples": 4,
        "interval_s": 3.0,
        "spacing_s": {"median": 3.0, "min": 3.0, "max": 4.5},
        "peak_gpu_memory_mib": {"0": 40, "1": 5},
        "samples_with_gpu_error": 1,
        "peak_rss_bytes": 300,
    }


def test_summary_of_an_even_number_of_gaps_takes_the_mean_of_the_middle_two():
    samples = [{"elapsed_s": t} for t in (0.0, 1.0, 3.0, 6.0, 10.0)]
    assert summary(samples, 1)["spacing_s"] == {"median": 2.5, "min": 1.0, "max": 4.0}


def test_summary_of_no_samples_has_nulls_not_zeros():
    assert summary(samples_of(""), 3.0) == {
        "samples": 0,
        "interval_s": 3.0,
        "spacing_s": {"median": None, "min": None, "max": None},
        "peak_gpu_memory_mib": None,
        "samples_with_gpu_error": 0,
        "peak_rss_bytes": None,
    }


def test_a_gap_needs_numbers_on_both_sides():
    samples = [{"elapsed_s": 0.0}, {"elapsed_s": "soon"}, {"elapsed_s": 2.0}, {"elapsed_s": 5.0}]
    assert summary(samples, 1)["spacing_s"] == {"median": 3.0, "min": 3.0, "max": 3.0}


def test_gpus_listed_reads_nvidia_smi_csv_and_skips_what_is_not_a_gpu_line():
    text = "0, NVIDIA H100 80GB HBM3, 81559\n1, NVIDIA H100 80GB HBM3, 81559\n\nNo devices were found\n2, Odd, [N/A]\n"
    assert gpus_listed(text) == [
        {"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559},
        {"index": 1, "name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559},
        {"index": 2, "name": "Odd", "memory_total_mib": 0},
    ]
    assert gpus_listed("") == []
