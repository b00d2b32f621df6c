# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Runs on the controller through AnsiballZ (Python >= 3.8, standard library only).
"""Which environment variable names hold secrets: one rule for provenance's env redaction and for the masking
of a pod's env in module output (_runpod_resources.secret_env_values).

Small on purpose, so that the RunPod modules carry it and not the provenance code.
"""

from __future__ import annotations

# A variable whose name contains one of these (case-insensitive) is a secret: HF_TOKEN, WANDB_API_KEY, ...
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "PRIVATE")
# Secret values shorter than this are redacted in env but not hunted elsewhere: replacing "1" (say,
# USE_AUTH=1) everywhere would corrupt every hash of a record and mask every 1 of an output.
MIN_SCRUB_LENGTH = 6


def is_secret_name(name):
    # type: (object) -> bool
    upper = str(name).upper()
    return any(marker in upper for marker in SECRET_MARKERS)
