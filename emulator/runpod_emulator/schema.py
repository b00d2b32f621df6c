"""A small JSON Schema subset and the request schemas of the v2 endpoints the emulator serves.

The real API answers 422 with one message per violation (`$.gpu.count: must be >= 1`); so does this.
Only keywords the request bodies use are supported: type, required, properties, additionalProperties
(false), items, minItems, maxItems, minimum, maximum, minLength, minProperties, enum, pattern.
"""

from __future__ import annotations

import re
from typing import Any

from .problems import ApiError, unprocessable

_TYPE_CHECKS = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}

_CUDA = r"^\d+\.\d+$"
_SSH_KEY = r"^(ssh|ecdsa|sk)-[^\s]+ [^\s]+([ \t][^\n\r]*)?$"
_PORT = r"^\d{1,5}/(tcp|udp|http)$"


def validate(value: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    """Every violation of `schema` by `value`, as `<json path>: <message>` strings."""
    errors: list[str] = []
    wanted = schema.get("type")
    if wanted is not None:
        types = wanted if isinstance(wanted, list) else [wanted]
        if not any(_TYPE_CHECKS[t](value) for t in types):
            return [f"{path}: expected {' or '.join(types)}, got {_json_type(value)}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: must be one of {', '.join(map(str, schema['enum']))}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{path}: must not be shorter than {schema['minLength']} characters")
        if "pattern" in schema and not _matches(schema["pattern"], value):
            errors.append(f"{path}: does not match pattern {schema['pattern']}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: must be >= {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: must be <= {schema['maximum']}")
    if isinstance(value, list):
        if len(value) > schema.get("maxItems", len(value)):
            errors.append(f"{path}: must have at most {schema['maxItems']} items")
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{path}: must have at least {schema['minItems']} items")
        if "items" in schema:
            for index, item in enumerate(value):
                errors.extend(validate(item, schema["items"], f"{path}[{index}]"))
    if isinstance(value, dict):
        errors.extend(_validate_object(value, schema, path))
    return errors


def _validate_object(value: dict[str, Any], schema: dict[str, Any], path: str) -> list[str]:
    errors: list[str] = []
    properties = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in value:
            errors.append(f"{path}: missing required property '{name}'")
    if len(value) < schema.get("minProperties", 0):
        errors.append(f"{path}: must have at least {schema['minProperties']} properties")
    names = schema.get("propertyNames")
    if names is not None:
        for name in value:
            errors.extend(
                f"{path}: property name {name!r} {msg.split(': ', 1)[1]}" for msg in validate(name, names, path)
            )
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            errors.extend(validate(item, properties[name], f"{path}.{name}"))
        elif extra is False:
            errors.append(f"{path}: additional properties '{name}' not allowed")
        elif isinstance(extra, dict):
            errors.extend(validate(item, extra, f"{path}.{name}"))
    return errors


def _matches(pattern: str, value: str) -> bool:
    """JSON Schema (ECMA-262) pattern semantics: a final `$` is the end of the string, where Python's `$`
    also matches before a trailing newline (so "22/tcp\n" would pass as a port)."""
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.search(pattern, value) is not None


def _json_type(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _TYPE_CHECKS[name](value):
            return name
    return type(value).__name__


def require_valid(value: Any, schema: dict[str, Any]) -> None:
    """Raise the API's 422 when `value` violates `schema`."""
    errors = validate(value, schema)
    if errors:
        raise unprocessable(errors)


def require_object(body: Any) -> dict[str, Any]:
    if body is None:
        raise ApiError(400, "request body is required (a JSON object)")
    if not isinstance(body, dict):
        raise unprocessable([f"$: expected object, got {_json_type(body)}"])
    return body


# The emulator hands env to podman and paths to `-v host:path`: names must be env names, no NUL, no colon.
_ENV = {
    "type": "object",
    "propertyNames": {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"},
    "additionalProperties": {"type": "string", "pattern": r"^[^\x00]*$"},
}
_MOUNT_PATH = {"type": "string", "pattern": r"^/[^\x00:,]*$"}
_PORTS = {"type": "array", "items": {"type": "string", "pattern": _PORT}}
_PERSISTENT = {
    "type": "object",
    "required": ["size", "path"],
    "additionalProperties": False,
    "properties": {"size": {"type": "integer", "minimum": 10}, "path": _MOUNT_PATH},
}
_NETWORK_MOUNT = {
    "type": "object",
    "required": ["volumeId", "path"],
    "additionalProperties": False,
    "properties": {"volumeId": {"type": "string", "minLength": 1}, "path": _MOUNT_PATH},
}
MOUNTS = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"persistent": _PERSISTENT, "network": {"type": "array", "maxItems": 1, "items": _NETWORK_MOUNT}},
}
_CONTAINER = {
    "args": {"type": "string"},
    "disk": {"type": "integer", "minimum": 1},
    "env": _ENV,
    "image": {"type": "string", "minLength": 1},
    "ports": _PORTS,
    "registry": {"type": ["string", "null"]},
}
CLOUDS = ["SECURE", "COMMUNITY"]

CREATE_POD = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        **_CONTAINER,
        "name": {"type": "string", "minLength": 1},
        "cloud": {"type": "string", "enum": CLOUDS},
        "cpu": {
            "type": "object",
            "required": ["id", "vcpuCount"],
            "additionalProperties": False,
            "properties": {"id": {"type": "string", "minLength": 1}, "vcpuCount": {"type": "integer", "minimum": 2}},
        },
        "dataCenterIds": {"type": "array", "items": {"type": "string"}},
        "globalNetworking": {"type": "boolean"},
        "gpu": {
            "type": "object",
            "required": ["id"],
            "additionalProperties": False,
            "properties": {
                "id": {"type": "string", "minLength": 1},
                "count": {"type": "integer", "minimum": 1},
                "allowedCudaVersions": {"type": "array", "items": {"type": "string", "pattern": _CUDA}},
                "minCudaVersion": {"type": "string", "pattern": _CUDA},
            },
        },
        "mounts": MOUNTS,
        "startJupyter": {"type": "boolean"},
        "startSsh": {"type": "boolean"},
        "templateId": {"type": "string", "minLength": 1},
    },
}

UPDATE_POD = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        **_CONTAINER,
        "globalNetworking": {"type": "boolean"},
        "locked": {"type": "boolean"},
        "mounts": MOUNTS,
        "name": {"type": "string", "minLength": 1},
        "templateId": {"type": "string"},
    },
}

POD_ACTIONS = ["start", "stop", "restart", "terminate"]
POD_ACTION = {
    "type": "object",
    "required": ["action"],
    "additionalProperties": False,
    "properties": {"action": {"type": "string", "enum": POD_ACTIONS}},
}

UPDATE_SSH_KEYS = {
    "type": "object",
    "required": ["keys"],
    "additionalProperties": False,
    "properties": {"keys": {"type": "array", "items": {"type": "string", "pattern": _SSH_KEY}}},
}

VOLUME_TYPES = ["STANDARD", "HIGH_PERFORMANCE"]
CREATE_VOLUME = {
    "type": "object",
    "required": ["name", "size", "dataCenter"],
    "additionalProperties": False,
    "properties": {
        "dataCenter": {"type": "string", "minLength": 1},
        "name": {"type": "string", "minLength": 1},
        "size": {"type": "integer", "minimum": 10, "maximum": 4096},
        "type": {"type": "string", "enum": VOLUME_TYPES},
    },
}
UPDATE_VOLUME = {
    "type": "object",
    "additionalProperties": False,
    "minProperties": 1,
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "size": {"type": "integer", "minimum": 10, "maximum": 4096},
    },
}

FAULT_KINDS = ["429", "500", "503", "latency", "drop", "500_after_create"]
FAULT = {
    "type": "object",
    "required": ["kind"],
    "additionalProperties": False,
    "properties": {
        "kind": {"type": "string", "enum": FAULT_KINDS},
        "count": {"type": "integer", "minimum": 1},
        "rate": {"type": "number", "minimum": 0.0, "maximum": 1.0},
        "method": {"type": "string", "enum": ["GET", "POST", "PUT", "PATCH", "DELETE"]},
        "path_prefix": {"type": "string", "pattern": r"^/"},
        "latency_ms": {"type": "integer", "minimum": 0, "maximum": 120000},
        "retry_after_s": {"type": "integer", "minimum": 0, "maximum": 3600},
        "seed": {"type": "integer"},
    },
}
KILL = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"grace_s": {"type": "number", "minimum": 0, "maximum": 120}},
}
CLOCK = {
    "type": "object",
    "required": ["advance_s"],
    "additionalProperties": False,
    "properties": {"advance_s": {"type": "number", "minimum": 0, "maximum": 10 * 365 * 86400}},
}
APPEND_LOGS = {
    "type": "object",
    "required": ["lines"],
    "additionalProperties": False,
    "properties": {
        "lines": {"type": "array", "maxItems": 5000, "items": {"type": "string"}},
        "source": {"type": "string", "enum": ["container", "system"]},
    },
}
