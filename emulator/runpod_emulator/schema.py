r"""A small JSON Schema subset and the request schemas of the v2 endpoints the emulator serves.

The real API answers 422 with one message per violation (`$.gpu.count: must be >= 1`); so does this.
Only keywords the request bodies use are supported: type, required, properties, additionalProperties
(false), items, minItems, maxItems, minimum, maximum, minLength, minProperties, propertyNames, enum, pattern.

JSON Schema 2020-12 semantics where Python's differ: an integer is any number with a zero fractional part
(`50.0` is the integer 50, and `require_valid` hands it on as 50), and `pattern` is an ECMA-262 regular
expression (`ecma_regex`: `\s`, `\d`, `\w`, `.` and `$` mean what they mean in JavaScript).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from .problems import ApiError, bad_request, unprocessable

# Integers beyond 64 bits are refused: no real server stores them, and some would overflow a float here.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _is_integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


_TYPE_CHECKS = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": _is_integer,
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}

# ECMA-262 character classes, written out for Python's `re` (whose \s, \d and \w are Unicode-wide and
# differ: \x1c-\x1f and \x85 are \s in Python only, U+FEFF in ECMA only; Python's \d takes any digit).
_ECMA_SPACE = r"\t\n\x0b\x0c\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_ECMA_CLASSES = {"s": _ECMA_SPACE, "d": "0-9", "w": "A-Za-z0-9_"}
_ECMA_DOT = r"[^\n\r\u2028\u2029]"


@functools.cache
def ecma_regex(pattern: str) -> re.Pattern[str]:
    r"""`pattern` (ECMA-262, as JSON Schema's `pattern` is) compiled for Python's `re` with the same meaning:
    \s \d \w (and \S \D \W outside classes) become explicit classes, `.` excludes every line
    terminator, `$` is the end of the input only (Python's also matches before a final newline)."""
    out: list[str] = []
    in_class = False
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            escaped = pattern[index + 1]
            body = _ECMA_CLASSES.get(escaped.lower())
            if body is None:
                out.append(pattern[index : index + 2])
            elif escaped.islower():
                out.append(body if in_class else f"[{body}]")
            elif in_class:
                raise ValueError(f"pattern {pattern!r}: \\{escaped} inside a character class is not supported")
            else:
                out.append(f"[^{body}]")
            index += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "$":
            char = r"\Z"
        elif char == ".":
            char = _ECMA_DOT
        out.append(char)
        index += 1
    return re.compile("".join(out))


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
        if "integer" in (wanted if isinstance(wanted, list) else [wanted]) and not INT64_MIN <= value <= INT64_MAX:
            errors.append(f"{path}: must be a 64-bit integer")
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
    """JSON Schema pattern semantics (ECMA-262, unanchored): see `ecma_regex`."""
    return ecma_regex(pattern).search(value) is not None


def integers_as_int(value: Any, schema: dict[str, Any]) -> Any:
    """`value` (valid against `schema`) with every integral float where the schema wants an integer made
    an int (50.0 -> 50); dicts and lists are changed in place."""
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for name, item in value.items():
            sub = properties.get(name, extra if isinstance(extra, dict) else None)
            if sub is not None:
                value[name] = integers_as_int(item, sub)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        value[:] = [integers_as_int(item, schema["items"]) for item in value]
    elif isinstance(value, float) and schema.get("type") == "integer":
        return int(value)
    return value


def _json_type(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _TYPE_CHECKS[name](value):
            return name
    return type(value).__name__


def require_valid(value: Any, schema: dict[str, Any]) -> None:
    """Raise the API's 422 when `value` violates `schema`; else make its integral floats ints (in place)."""
    errors = validate(value, schema)
    if errors:
        raise unprocessable(errors)
    integers_as_int(value, schema)


_ASCII_INT = re.compile(r"-?[0-9]+")


def query_int(query: dict[str, list[str]], name: str, default: int, minimum: int, maximum: int | None = None) -> int:
    """An integer query parameter, `default` when absent. Only ASCII digits count (str.isdigit and int()
    also take '²' or '٣'): anything else is a 400 naming the parameter; out of range, a 422."""
    values = query.get(name)
    if not values:
        return default
    raw = values[0]
    if not _ASCII_INT.fullmatch(raw):
        raise bad_request(f"{name}: {raw[:40]!r} is not an integer (ASCII digits 0-9, optional '-')")
    digits = raw.lstrip("-")
    value = int(raw) if len(digits) <= 30 else (-1 if raw.startswith("-") else 1) * 10**30
    if value < minimum or (maximum is not None and value > maximum):
        bounds = f"from {minimum} to {maximum}" if maximum is not None else f">= {minimum}"
        raise unprocessable([f"{name}: {raw[:40]!r} is not an integer {bounds}"])
    return value


def require_object(body: Any) -> dict[str, Any]:
    if body is None:
        raise ApiError(400, "request body is required (a JSON object)")
    if not isinstance(body, dict):
        raise unprocessable([f"$: expected object, got {_json_type(body)}"])
    return body


# As the spec has them: what the podman backend cannot run (env names, NUL, `:` in a mount path) is its own
# check (PodmanBackend.check_pod), so the memory backend takes whatever RunPod's schema takes.
_ENV = {"type": "object", "additionalProperties": {"type": "string"}}
_MOUNT_PATH = {"type": "string"}
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
    "properties": {"volumeId": {"type": "string"}, "path": _MOUNT_PATH},
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
    "image": {"type": "string"},
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
                "id": {"type": "string"},
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
