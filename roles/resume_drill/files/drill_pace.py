# Copyright: trainops.gpu contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Telemetry hook that paces the drill's workload: sleeps TRAINOPS_DRILL_STEP_DELAY_S seconds after every step.

The reference trainer does 200 small steps in a fraction of a second; the drill needs a run that lasts long
enough for an interruption to land in the middle of it, without loading the CPU. Hooks are outside the
config hash and run after the step's journal line is written, so the math (and the journal) is unchanged.

    "telemetry_hooks": ["drill_pace:pace"]   with this directory on PYTHONPATH
"""

import os
import time

_DELAY_S = float(os.environ.get("TRAINOPS_DRILL_STEP_DELAY_S", "0") or 0)


def pace(record):
    """Sleep the configured delay (the record is not used)."""
    if _DELAY_S > 0:
        time.sleep(_DELAY_S)
