# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What pod_tools decides from what it found: which program is missing, whether apt may try, what the failure says."""

from __future__ import annotations

import sys
import time

from ansible_collections.trainops.gpu.plugins.module_utils._pod_tools import (
    PROGRAMS,
    apt_errors,
    failure_message,
    install_command,
    packages_of,
    parse_candidates,
    refusal,
    run_bounded,
    setsid_works,
    unmet,
    without_candidate,
)

ALL = {"rsync": "/usr/bin/rsync", "python3": "/usr/bin/python3", "tmux": "/usr/bin/tmux"}


def names(requirements):
    return [req["name"] for req in requirements]


def test_the_programs_sync_and_job_run():
    assert PROGRAMS == ("python3", "rsync", "tmux")
    assert unmet(ALL, setsid=False) == []


def test_a_missing_rsync_or_python3_is_always_unmet_tmux_only_without_setsid():
    found = dict(ALL, rsync=None, tmux=None)
    assert names(unmet(found, setsid=True)) == ["rsync"]
    assert names(unmet(found, setsid=False)) == ["rsync", "tmux"]
    assert packages_of(unmet(dict(found, python3=None), setsid=False)) == ["rsync", "python3", "tmux"]


def test_apt_may_try_only_when_allowed_present_and_root():
    assert refusal(install_missing=True, apt_get="/usr/bin/apt-get", is_root=True) is None
    assert "installing is turned off" in refusal(False, "/usr/bin/apt-get", True)
    assert refusal(True, None, True) == "the pod has no apt-get to install it with"
    assert "needs root" in refusal(True, "/usr/bin/apt-get", False)


def test_the_failure_names_the_program_what_needs_it_why_and_what_to_do():
    missing = unmet(dict(ALL, rsync=None), setsid=True)
    message = failure_message(missing, "the pod has no apt-get to install it with")
    assert message.startswith("missing on the pod: rsync (needed by the sync role")
    assert "rsync cannot be installed: the pod has no apt-get to install it with. To fix: use an image" in message
    assert "apt-get install -y --no-install-recommends rsync" in message
    assert "bootstrap_install_missing: true" not in message
    turned_off = failure_message(missing, refusal(False, "/usr/bin/apt-get", True), install_missing=False)
    assert turned_off.endswith("or let bootstrap install it with apt (bootstrap_install_missing: true)")


POLICY = """rsync:
  Installed: (none)
  Candidate: 3.2.7-1+deb12u6
  Version table:
     3.2.7-1+deb12u6 500
        500 file:/opt/trainops-apt ./ Packages
tmux:
  Installed: (none)
  Candidate: (none)
  Version table:
"""


def test_candidates_from_apt_cache_policy():
    found = parse_candidates(POLICY, ["rsync", "tmux", "python3"])
    assert found == {"rsync": "3.2.7-1+deb12u6", "tmux": None, "python3": None}
    # No apt lists at all: apt-cache policy prints nothing for the package, so an update is needed.
    assert without_candidate(found) == ["python3", "tmux"]
    assert without_candidate(parse_candidates("", ["rsync"])) == ["rsync"]


def test_the_install_command_and_apts_errors():
    assert install_command(["rsync"], 12.7) == [
        "apt-get", "install", "-y", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=12", "rsync",
    ]  # fmt: skip
    output = (
        "Get:1 file:/opt/trainops-apt ./ InRelease\nErr:3 file:/opt/trainops-apt ./ Packages\n"
        "  File not found - /opt/trainops-apt/./Packages\nReading package lists...\nE: Failed to fetch x\n"
    )
    assert apt_errors(output) == (
        "Err:3 file:/opt/trainops-apt ./ Packages / File not found - /opt/trainops-apt/./Packages"
        " / E: Failed to fetch x"
    )
    assert apt_errors("no errors here\nlast line") == "no errors here\nlast line"


def test_run_bounded_returns_output_and_stops_a_command_past_its_deadline():
    rc, output, timed_out = run_bounded([sys.executable, "-c", "print('ok')"], time.monotonic() + 30)
    assert (rc, output, timed_out) == (0, "ok\n", False)
    started = time.monotonic()
    sleeper = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"]
    rc, output, timed_out = run_bounded(sleeper, started + 1, grace=1)
    assert rc is None and timed_out and time.monotonic() - started < 10
    assert run_bounded(["/nonexistent/apt-get"], time.monotonic() + 5)[0] == 127
    assert run_bounded([sys.executable, "-c", "pass"], time.monotonic() - 1) == (None, "", True)


def test_setsid_works_here():
    assert setsid_works() is True
