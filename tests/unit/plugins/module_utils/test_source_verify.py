# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pod-side check of a pushed tree (sync_push), on real files in temporary directories."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.trainops.gpu.plugins.module_utils import _source_verify as sv

SECOND = 10**9


def manifest_of(root, names):
    lines = []
    for name in names:
        digest = hashlib.sha256((root / name).read_bytes()).hexdigest()
        if "\\" in name:
            lines.append(f"\\{digest}  {name.replace(chr(92), chr(92) * 2)}\n")
        else:
            lines.append(f"{digest}  {name}\n")
    return "".join(lines).encode()


@pytest.fixture
def run(tmp_path):
    """A pod run directory with src/ holding three files; (run dir, manifest bytes, its sha256)."""
    src = tmp_path / "run" / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "a.py").write_text("print('a')\n")
    (src / "pkg" / "b.py").write_text("B = 2\n")
    (src / "back\\slash.txt").write_text("odd name\n")
    data = manifest_of(src, ["a.py", "back\\slash.txt", "pkg/b.py"])
    return tmp_path / "run", data, hashlib.sha256(data).hexdigest()


def later(run_dir):
    """A clock well past every file's change: nothing is racy."""
    return max(os.lstat(p).st_ctime_ns for p in run_dir.rglob("*")) + 10 * SECOND


def test_parse_manifest_reads_coreutils_escapes_and_refuses_bad_lines():
    digest = "a" * 64
    text = f"{digest}  plain.txt\n\\{digest}  back\\\\slash.txt\n\n"
    assert sv.parse_manifest(text) == [("plain.txt", digest), ("back\\slash.txt", digest)]
    for bad in (f"{digest} plain.txt", "xyz  a", f"{digest}  ", f"{digest}  /etc/passwd", f"{digest}  a/../../b"):
        with pytest.raises(ValueError):
            sv.parse_manifest(bad + "\n")


def test_matching_tree_is_checked_and_the_manifest_kept(run):
    run_dir, data, sha = run
    found = sv.verify(str(run_dir), "src", data, sha, now_ns=later(run_dir))
    assert found == {"checked": 3, "hashed": 3, "bytes_hashed": 11 + 9 + 6, "bad": [], "manifest_written": True}
    assert (run_dir / "source.sha256").read_bytes() == data
    # sha256sum reads the kept manifest as its own.
    check = subprocess.run(["sha256sum", "--check", "--strict", "--quiet", "../source.sha256"], cwd=run_dir / "src",
                           capture_output=True, text=True, check=False)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr


def test_second_check_reads_nothing_unchanged(run):
    run_dir, data, sha = run
    sv.verify(str(run_dir), "src", data, sha, now_ns=later(run_dir))
    again = sv.verify(str(run_dir), "src", data, sha, now_ns=later(run_dir))
    assert again == {"checked": 3, "hashed": 0, "bytes_hashed": 0, "bad": [], "manifest_written": False}
    full = sv.verify(str(run_dir), "src", data, sha, mode="full", now_ns=later(run_dir))
    assert full["hashed"] == 3 and full["bad"] == []


def test_an_edit_with_size_and_mtime_restored_is_read_and_named(run):
    run_dir, data, sha = run
    sv.verify(str(run_dir), "src", data, sha, now_ns=later(run_dir))
    target = run_dir / "src" / "a.py"
    before = target.stat()
    target.write_text("print('A')\n")
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    found = sv.verify(str(run_dir), "src", data, sha, now_ns=later(run_dir))
    assert found["hashed"] == 1
    assert found["bad"] == ["a.py: sha256 differs from the manifest"]


def test_missing_link_and_directory_in_place_of_files_are_named(run):
    run_dir, data, sha = run
    src = run_dir / "src"
    (src / "a.py").unlink()
    (src / "pkg" / "b.py").unlink()
    (src / "pkg" / "b.py").symlink_to("../a.py")
    (src / "back\\slash.txt").unlink()
    (src / "back\\slash.txt").mkdir()
    found = sv.verify(str(run_dir), "src", data, sha, now_ns=later(run_dir))
    assert found["bad"] == ["a.py: missing", "back\\slash.txt: not a regular file", "pkg/b.py: not a regular file"]


def test_racy_hashes_are_not_kept(run):
    run_dir, data, sha = run
    newest = max(os.stat(p).st_ctime_ns for p in (run_dir / "src").rglob("*"))
    sv.verify(str(run_dir), "src", data, sha, now_ns=newest + 50 * 10**6)
    assert sv.load_cache(str(run_dir / sv.CACHE_NAME)) == {}
    assert sv.verify(str(run_dir), "src", data, sha, now_ns=newest + 150 * 10**6)["hashed"] == 3
    assert len(sv.load_cache(str(run_dir / sv.CACHE_NAME))) == 3


def test_racy_rule_uses_a_two_second_window_for_whole_second_timestamps():
    now = 1_800_000_000 * SECOND
    fine = [1, now - 150 * 10**6 + 7, now - 150 * 10**6 + 7, 1, 1]
    coarse = [1, now - SECOND, now - SECOND, 1, 1]
    assert not sv.racy(fine, now)
    assert sv.racy([1, now - 50 * 10**6 + 7, now - 50 * 10**6 + 7, 1, 1], now)
    assert sv.racy(coarse, now)
    assert not sv.racy([1, now - 3 * SECOND, now - 3 * SECOND, 1, 1], now)


def test_damaged_manifest_and_bad_requests_are_refused(run, tmp_path):
    run_dir, data, sha = run
    with pytest.raises(sv.VerifyError, match="damaged on the way"):
        sv.verify(str(run_dir), "src", data[:-3], sha)
    with pytest.raises(sv.VerifyError, match="mode must be one of"):
        sv.verify(str(run_dir), "src", data, sha, mode="quick")
    with pytest.raises(sv.VerifyError, match="is not a directory on the pod"):
        sv.verify(str(tmp_path / "nowhere"), "src", data, sha)
    assert not (tmp_path / "nowhere").exists()


def test_a_damaged_cache_only_costs_a_full_read(run):
    run_dir, data, sha = run
    (run_dir / sv.CACHE_NAME).write_text("{broken")
    assert sv.verify(str(run_dir), "src", data, sha, now_ns=later(run_dir))["hashed"] == 3
    assert json.loads((run_dir / sv.CACHE_NAME).read_text())["version"] == sv.CACHE_VERSION


def run_script(run_dir, sha, stdin):
    """The file as sync_push runs it on the pod: python -c <its text> ARGS, the request on standard input."""
    with open(sv.__file__, encoding="utf-8") as handle:
        script = handle.read()
    done = subprocess.run([sys.executable, "-c", script, str(run_dir), "src", sha, "cached"], input=stdin,
                          capture_output=True, check=False, timeout=60)  # fmt: skip
    return done.returncode, json.loads(done.stdout.decode().strip().splitlines()[-1])


def test_the_script_waits_for_go_and_stops_on_anything_else(run):
    run_dir, data, sha = run
    request = b"%d\n" % len(data) + data
    rc, out = run_script(run_dir, sha, request + b"stop\n")
    assert (rc, out) == (0, {"skipped": True})
    assert not (run_dir / "source.sha256").exists()
    rc, out = run_script(run_dir, sha, request)  # the controller went away: no go
    assert (rc, out) == (0, {"skipped": True})
    rc, out = run_script(run_dir, sha, request + b"go\n")
    assert rc == 0 and out["checked"] == 3 and out["bad"] == [] and out["manifest_written"]
    rc, out = run_script(run_dir, sha, b"%d\n" % (len(data) + 5) + data)
    assert rc == 1 and "cut short" in out["error"]
    rc, out = run_script(run_dir, sha, b"many\n")
    assert rc == 1 and "length" in out["error"]


def test_read_request_reads_exactly_the_announced_bytes():
    stream = io.BytesIO(b"5\nhellogo\n")
    assert sv.read_request(stream) == b"hello"
    assert stream.readline() == b"go\n"
