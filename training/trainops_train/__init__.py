"""trainops.gpu reference trainer: deterministic, resumable bit for bit, with verified checkpoints."""

from importlib import metadata

try:
    # The collection's version (galaxy.yml, copied into training/pyproject.toml by `make version`).
    __version__ = metadata.version("trainops-train")
except metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "unknown"
