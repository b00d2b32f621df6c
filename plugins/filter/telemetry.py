# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A job's telemetry for reports: plugins/module_utils/_telemetry.py holds the definitions."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: telemetry_summary
short_description: Summarise a job's telemetry.jsonl
version_added: 0.3.0
description:
  - Reads the text of a job's C(telemetry.jsonl) (one JSON sample per line, as M(trainops.gpu.job) writes it) and
    returns the sample count, the spacing of consecutive samples, the peak GPU memory per GPU index, the samples
    with a GPU error and the peak RSS of the job's processes. A torn last line is skipped.
  - The same file holds the filter C(trainops.gpu.nvidia_smi_gpus), which turns
    C(nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits) output into a list of
    C({index, name, memory_total_mib}).
options:
  _input:
    description: The file's text (an empty string for a missing file).
    type: str
    required: true
  interval_s:
    description: The interval the job was asked to sample at, recorded beside the measured spacing.
    type: float
    required: true
author:
  - trainops.gpu maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Summarise the pulled telemetry
  ansible.builtin.set_fact:
    telemetry: >-
      {{ lookup('ansible.builtin.file', run_dir ~ '/job/bench/telemetry.jsonl')
         | trainops.gpu.telemetry_summary(3.0) }}
"""

RETURN = r"""
_value:
  description:
    - C(samples), C(interval_s), C(spacing_s) (C(median), C(min), C(max); null without two samples),
      C(peak_gpu_memory_mib) (index as a string to MiB; null without GPU samples), C(samples_with_gpu_error),
      C(peak_rss_bytes) (null without samples).
  type: dict
"""

from ansible_collections.trainops.gpu.plugins.module_utils._telemetry import gpus_listed, samples_of, summary


def _telemetry_summary(text, interval_s):
    return summary(samples_of(text if isinstance(text, str) else ""), float(interval_s))


def _nvidia_smi_gpus(text):
    return gpus_listed(text if isinstance(text, str) else "")


class FilterModule:
    def filters(self):
        return {"telemetry_summary": _telemetry_summary, "nvidia_smi_gpus": _nvidia_smi_gpus}
