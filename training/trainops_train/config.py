"""Training configuration: parsed from JSON (or YAML when PyYAML is present), validated, hashed."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
from typing import Any

from .run_layout import run_id_problem


class ConfigError(ValueError):
    """A configuration file or value that is wrong; the message names what is wrong."""


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    input_dim: int = 32
    hidden_dim: int = 64
    depth: int = 2
    classes: int = 8
    dropout: float = 0.1


@dataclasses.dataclass(frozen=True)
class DataConfig:
    samples: int = 2048
    batch_size: int = 32
    noise: float = 0.05
    feature_drop: float = 0.1


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    lr: float = 0.01
    weight_decay: float = 0.01
    warmup_steps: int = 10
    min_lr_ratio: float = 0.1


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    # "steps": every `every_steps`; "seconds": every `every_seconds` of wall time; "auto": Daly's
    # optimum from the measured save time and `mtbi_seconds` (see docs/checkpoints.md).
    mode: str = "steps"
    every_steps: int = 50
    every_seconds: float = 600.0
    mtbi_seconds: float = 3600.0
    keep_last: int = 3
    save_on_finish: bool = True


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    run_id: str = "local"
    seed: int = 1234
    steps: int = 200
    threads: int = 1
    device: str = "auto"
    allow_config_change: bool = False
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)
    telemetry_hooks: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["telemetry_hooks"] = list(self.telemetry_hooks)
        return data


# Keys that change how or where checkpoints are written, or what is reported, but not the training math:
# a resume may change them freely. Everything else is in the config hash.
UNHASHED_KEYS = ("run_id", "allow_config_change", "checkpoint", "telemetry_hooks", "device")

_SECTIONS = {"model": ModelConfig, "data": DataConfig, "optim": OptimConfig, "checkpoint": CheckpointConfig}


def _coerce(where: str, expected: Any, value: Any) -> Any:
    if expected in ("float", float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where} must be a number, got {value!r}")
        return float(value)
    if expected in ("int", int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, got {value!r}")
        return value
    if expected in ("bool", bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}")
        return value
    if expected in ("str", str):
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {value!r}")
        return value
    if expected == "tuple[str, ...]":
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ConfigError(f"{where} must be a list of strings, got {value!r}")
        return tuple(value)
    raise ConfigError(f"{where}: unsupported type {expected!r}")


def _build(cls: type, raw: Any, where: str) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where or 'config'} must be a mapping, got {type(raw).__name__}")
    fields = {field.name: field for field in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        prefix = f"{where}." if where else ""
        raise ConfigError(f"unknown config key(s): {', '.join(prefix + key for key in unknown)}")
    values = {}
    for name, value in raw.items():
        key = f"{where}.{name}" if where else name
        if name in _SECTIONS and not where:
            values[name] = _build(_SECTIONS[name], value, key)
        else:
            values[name] = _coerce(key, fields[name].type, value)
    return cls(**values)


def validate(config: TrainConfig) -> None:
    """Raise ConfigError naming the first value outside its allowed range."""
    checks = [
        (config.steps >= 1, "steps must be >= 1"),
        (config.threads >= 1, "threads must be >= 1"),
        (config.device in ("auto", "cpu", "cuda"), "device must be auto, cpu or cuda"),
        (config.seed >= 0, "seed must be >= 0"),
        (not run_id_problem(config.run_id), run_id_problem(config.run_id)),
        (config.model.input_dim >= 1 and config.model.hidden_dim >= 1, "model dims must be >= 1"),
        (config.model.depth >= 1, "model.depth must be >= 1"),
        (config.model.classes >= 2, "model.classes must be >= 2"),
        (0.0 <= config.model.dropout < 1.0, "model.dropout must be in [0, 1)"),
        (config.data.batch_size >= 1, "data.batch_size must be >= 1"),
        (config.data.samples >= config.data.batch_size, "data.samples must be >= data.batch_size"),
        (config.data.noise >= 0.0, "data.noise must be >= 0"),
        (0.0 <= config.data.feature_drop < 1.0, "data.feature_drop must be in [0, 1)"),
        (config.optim.lr > 0.0, "optim.lr must be > 0"),
        (config.optim.warmup_steps >= 0, "optim.warmup_steps must be >= 0"),
        (0.0 <= config.optim.min_lr_ratio <= 1.0, "optim.min_lr_ratio must be in [0, 1]"),
        (config.checkpoint.mode in ("steps", "seconds", "auto"), "checkpoint.mode must be steps, seconds or auto"),
        (config.checkpoint.every_steps >= 1, "checkpoint.every_steps must be >= 1"),
        (config.checkpoint.every_seconds > 0.0, "checkpoint.every_seconds must be > 0"),
        (config.checkpoint.mtbi_seconds > 0.0, "checkpoint.mtbi_seconds must be > 0"),
        (config.checkpoint.keep_last >= 1, "checkpoint.keep_last must be >= 1"),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)
    for hook in config.telemetry_hooks:
        if ":" not in hook:
            raise ConfigError(f"telemetry_hooks entry {hook!r} must be 'module:callable'")


def from_dict(raw: dict[str, Any]) -> TrainConfig:
    config = _build(TrainConfig, raw, "")
    validate(config)
    return config


def load(path: str | pathlib.Path) -> TrainConfig:
    """Read and validate a config file (.json, or .yml/.yaml when PyYAML is installed)."""
    path = pathlib.Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from exc
    if path.suffix in (".yml", ".yaml"):
        try:
            import yaml
        except ImportError as exc:
            raise ConfigError(f"{path} is YAML but PyYAML is not installed; use JSON") from exc
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    else:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path} is not valid JSON: {exc}") from exc
    return from_dict(raw)


def hashed_view(config: TrainConfig) -> dict[str, Any]:
    """The part of the config that defines the training math (what the config hash covers)."""
    data = config.to_dict()
    for key in UNHASHED_KEYS:
        data.pop(key, None)
    return data


def config_hash(config: TrainConfig) -> str:
    """sha256 of the canonical JSON of the hashed view; floats as repr, so equal configs hash equal."""
    canonical = json.dumps(hashed_view(config), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()
