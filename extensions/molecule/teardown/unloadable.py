"""Make a checkpoint that verifies by hash but does not load: replace one payload file with bytes torch cannot
read and rewrite manifest.json and SHA256SUMS to match them (as a writer with a bug would).

Usage: unloadable.py CHECKPOINT_DIR [FILE]  (FILE defaults to model.pt). Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path


def main() -> int:
    step = Path(sys.argv[1])
    name = sys.argv[2] if len(sys.argv) > 2 else "model.pt"
    payload = b"this is not a torch file\n"
    (step / name).write_bytes(payload)
    manifest = json.loads((step / "manifest.json").read_text())
    manifest["files"][name] = {"sha256": hashlib.sha256(payload).hexdigest(), "size": len(payload)}
    (step / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    lines = []
    for line in (step / "SHA256SUMS").read_text().splitlines():
        listed = line.split("  ", 1)[1]
        lines.append(f"{hashlib.sha256((step / listed).read_bytes()).hexdigest()}  {listed}")
    (step / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
