"""Wheels the tests write themselves (pods and this machine install from a local directory: no index)."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def write_wheel(
    directory: Path, name: str, version: str, requires: tuple[str, ...] = (), source: str | None = None
) -> None:
    """A real (minimal) wheel: a module, METADATA with its Requires-Dist, WHEEL and a RECORD with hashes."""
    dist = f"{name.replace('-', '_')}-{version}"
    files = {
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    }
    files[f"{dist}.dist-info/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {requirement}\n" for requirement in requires
    )
    if source is not None:
        files[f"{name.replace('-', '_')}.py"] = source
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}.dist-info/RECORD,,")
    files[f"{dist}.dist-info/RECORD"] = "\n".join(record) + "\n"
    with zipfile.ZipFile(directory / f"{dist}-py3-none-any.whl", "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
