"""trainops.gpu reference trainer: deterministic, resumable bit for bit, with verified checkpoints."""

__version__ = "0.1.0"
