"""Nothing in the repository names a network target off 127.0.0.0/8.

Pods, the emulator and every test talk over loopback only; a literal address from a private or
public range in tracked text is a defect (the one exception: 0.0.0.0 as "no address").
"""

from __future__ import annotations

import ipaddress
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOTTED_QUAD = re.compile(r"(?<![\w.])(\d{1,3}(?:\.\d{1,3}){3})(?![\w.])")


def tracked_text_files() -> list[pathlib.Path]:
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    return [ROOT / name for name in out.decode().split("\0") if name]


def off_loopback_addresses(text: str) -> list[str]:
    found = []
    for match in DOTTED_QUAD.finditer(text):
        try:
            address = ipaddress.IPv4Address(match.group(1))
        except ValueError:
            continue
        if address.is_loopback or address.is_unspecified:
            continue
        found.append(str(address))
    return found


def test_scanner_flags_private_and_public_addresses():
    # Built from parts so that this file itself names no such address.
    samples = [".".join(map(str, quad)) for quad in ((10, 88, 0, 4), (192, 168, 1, 1), (8, 8, 8, 8))]
    assert off_loopback_addresses(f"bind {samples[0]} and {samples[1]} or {samples[2]}") == samples
    assert off_loopback_addresses("ssh root@127.0.0.1 -p 2222; listen 0.0.0.0; torch 2.13.0") == []


def test_no_tracked_file_names_an_address_off_loopback():
    offenders = []
    for path in tracked_text_files():
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        offenders += [f"{path.relative_to(ROOT)}: {addr}" for addr in off_loopback_addresses(text)]
    assert not offenders, "addresses off 127.0.0.0/8 in tracked files:\n" + "\n".join(offenders)
