"""Property-based run of RunPod's OpenAPI document against the emulator (Schemathesis), bounded in time.

Every operation the emulator implements gets generated requests, valid ones and ones the spec forbids
(Schemathesis' positive and negative modes), against a memory-backend emulator. Checks on every answer:
no 5xx, a status code the spec documents, its content type and body schema, its headers; a request the
spec forbids must be refused (4xx), and one it allows is never a 422 unless the error is one of the
documented differences (STRICTER_THAN_SPEC). Path ids are swapped for live resources in most cases, so updates,
actions and deletes reach real records instead of a 404.

Bounds: MAX_EXAMPLES per operation (derandomized: the same requests every run) and, as a guard on a
loaded machine, BUDGET_S in all: past it the remaining examples send nothing. The request count and the
time are printed at the end of the module (pytest -s, or the `-rA` summary).
"""

from __future__ import annotations

import os
import re
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")
from emulator_helpers import GPU, IMPLEMENTED  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402
from runpod_emulator.testing import EmulatorProcess  # noqa: E402
from schemathesis import checks  # noqa: E402

# serial: pytest-xdist collapses Schemathesis' per-operation parametrization into one test that fuzzes a single
# operation, so `make pytest` runs this module in a process of its own (fuzz_target refuses an xdist worker).
pytestmark = [pytest.mark.slow, pytest.mark.serial]

REPO_ROOT = Path(__file__).resolve().parents[2]
SPEC = next(
    (
        path
        for path in (
            REPO_ROOT.parent / "shared" / "runpod" / "openapi-v2.json",
            Path("/work/shared/runpod/openapi-v2.json"),
        )
        if path.is_file()
    ),
    None,
)
if SPEC is None:
    pytest.skip("RunPod's OpenAPI document (../shared/runpod/openapi-v2.json) is not here", allow_module_level=True)

MAX_EXAMPLES = 100
BUDGET_S = 75.0
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.response_headers_conformance,
    checks.negative_data_rejection,
]
# Where the emulator is stricter than the spec on purpose (docs/emulator.md, "Differences from RunPod"):
# ports must be port/protocol, integers fit 64 bits, billing times lie within 1970 .. 9000.
STRICTER_THAN_SPEC = re.compile(
    r"^\$\.ports\[\d+\]: does not match pattern|: must be a 64-bit integer$|^(startTime|endTime): .* is outside 1970"
)
CATALOG_IDS = {"gpus": GPU, "cpus": "cpu3c", "datacenters": "EU-RO-1"}

schema = schemathesis.openapi.from_path(SPEC).include(
    lambda ctx: (ctx.operation.method.upper(), ctx.operation.path) in IMPLEMENTED
)
# The key is always sent (auth has its own tests); query parameters the operation does not define are not
# generated: OpenAPI does not forbid them and the emulator, like most servers, ignores them.
schema.config.generation.update(with_security_parameters=False, allow_extra_parameters=False)
STATS: dict[str, Any] = {"requests": 0, "started": None, "operations": set(), "skipped": 0}


class LiveResources:
    """A pod and a network volume that exist (re-created when a fuzzed DELETE or terminate took them)."""

    def __init__(self, emu: EmulatorProcess) -> None:
        self.emu = emu
        self.pod_id = ""
        self.volume_id = ""

    def pod(self) -> str:
        if not self.pod_id or self.emu.api("GET", f"/v2/pods/{self.pod_id}")[0] != 200:
            body = {"name": "fuzz", "image": "i", "gpu": {"id": GPU}}
            self.pod_id = self.emu.admin("POST", "/v2/pods", body)["id"]
        return self.pod_id

    def volume(self) -> str:
        if not self.volume_id or self.emu.api("GET", f"/v2/network-volumes/{self.volume_id}")[0] != 200:
            body = {"name": "fuzz", "size": 10, "dataCenter": "EU-RO-1"}
            self.volume_id = self.emu.admin("POST", "/v2/network-volumes", body)["id"]
        return self.volume_id

    def id_for(self, path: str, generated: str) -> str:
        """A live id for two cases in three (chosen from the generated id, so runs repeat), else `generated`."""
        if zlib.crc32(generated.encode("utf-8", "surrogatepass")) % 3 == 0:
            return generated
        if path.startswith("/v2/pods/"):
            return self.pod()
        if path.startswith("/v2/network-volumes/"):
            return self.volume()
        return CATALOG_IDS[path.split("/")[3]]


@pytest.fixture(scope="module")
def fuzz_target(tmp_path_factory: pytest.TempPathFactory):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.fail("the Schemathesis run needs one process: pytest -m serial (pytest-xdist fuzzes one operation only)")
    extra = ["--rate-limit", "minute=1000000,hour=1000000,day=1000000", "--log-follow-seconds", "0"]
    with EmulatorProcess(backend="memory", state_dir=tmp_path_factory.mktemp("fuzz-emu"), extra_args=extra) as emu:
        STATS["started"] = time.monotonic()
        yield emu, LiveResources(emu)
        took = time.monotonic() - STATS["started"]
        print(
            f"\nschemathesis fuzz: {STATS['requests']} requests over {len(STATS['operations'])} operations "
            f"in {took:.1f} s ({STATS['skipped']} examples past the {BUDGET_S:.0f} s budget sent nothing)"
        )


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_implemented_operation_conforms(case, fuzz_target):
    emu, live = fuzz_target
    if time.monotonic() - STATS["started"] > BUDGET_S:
        STATS["skipped"] += 1
        return
    if case.path_parameters and "id" in case.path_parameters:
        case.path_parameters["id"] = live.id_for(case.operation.path, str(case.path_parameters["id"]))
    label = f"{case.operation.method.upper()} {case.operation.path}"
    STATS["requests"] += 1
    STATS["operations"].add(label)
    # The spec gives the log stream the schema {"type": "string"}, and Schemathesis checks each parsed SSE
    # event (an object) against it: the stream's format is checked in test_emulator_spec_conformance.
    excluded = [checks.response_schema_conformance] if label == "GET /v2/pods/{id}/logs" else []
    response = case.call(base_url=emu.url, headers={"Authorization": f"Bearer {emu.api_key}"}, timeout=30)
    case.validate_response(response, checks=[check for check in CHECKS if check not in excluded])
    if response.status_code == 422 and str(case._meta.generation.mode) == "positive":
        # A request the spec allows, refused as a contract violation: only the documented differences.
        errors = response.json().get("errors", [])
        undocumented = [error for error in errors if not STRICTER_THAN_SPEC.search(error)]
        assert not undocumented, f"{label}: the spec allows what the emulator refuses: {undocumented}"
