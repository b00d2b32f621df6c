"""runpod_catalog_info's placement against the emulator's catalog: data centers with stock for a GPU type, best
first, the fallback order among equals, the filters (CUDA, network volume type, candidates), the refusals; and a
network volume created where it points, with a pod on it (the runbook's flow, docs/runpod_execution.md step 3).

The emulator's RTX 4090 stock: EU-SE-1 HIGH (CUDA 12.6, STANDARD volumes only), EU-RO-1 MEDIUM (CUDA 12.8,
STANDARD and HIGH_PERFORMANCE), none elsewhere.
"""

from __future__ import annotations

import pytest
from runpod_integration_helpers import MUTATING, live_pods, recorded, run_playbook, spec_violations

RUNBOOK = {"data_center_ids": ["EU-RO-1", "EU-SE-1", "US-TX-3"], "network_volume_type": "STANDARD"}
CASES = [
    # case, request, expected placement ids
    ("stock-first", {}, ["EU-SE-1", "EU-RO-1"]),
    ("runbook", RUNBOOK, ["EU-SE-1", "EU-RO-1"]),
    ("cuda-12.8-falls-back", {**RUNBOOK, "min_cuda_version": "12.8"}, ["EU-RO-1"]),
    ("high-performance-volumes", {"network_volume_type": "HIGH_PERFORMANCE"}, ["EU-RO-1"]),
    ("candidates-only", {"data_center_ids": ["EU-RO-1", "US-TX-3"]}, ["EU-RO-1"]),
    ("nowhere-in-candidates", {"data_center_ids": ["US-TX-3"]}, []),
    ("too-many-gpus", {"gpu_count": 9}, []),
    ("h100", {"gpu_type": "NVIDIA H100 80GB HBM3"}, ["EU-RO-1", "US-TX-3"]),
]
REFUSED = [
    ("needs-gpu-type", {"data_center_ids": ["EU-RO-1"]}, "give gpu_type and availability=true too"),
    (
        "needs-availability",
        {"gpu_type": "NVIDIA GeForce RTX 4090", "availability": False, "min_cuda_version": "12.8"},
        "give gpu_type and availability=true too",
    ),
    ("cuda-format", {"gpu_type": "NVIDIA GeForce RTX 4090", "min_cuda_version": "12"}, "'12' is not major.minor"),
    (
        "unknown-dc",
        {"gpu_type": "NVIDIA GeForce RTX 4090", "data_center_ids": ["MARS-1", "EU-RO-1"]},
        "unknown data center 'MARS-1'; the catalog lists: EU-RO-1, EU-SE-1, US-TX-3",
    ),
]


@pytest.mark.slow
def test_placement_ranks_by_stock_with_fallbacks_and_the_volume_goes_there(emulator, openapi):
    cases = [{"case": case, **request} for case, request, _expected in CASES]
    refused = [{"case": case, **request} for case, request, _expected in REFUSED]
    run = run_playbook(emulator, "placement.yml", {"cases": cases, "refused": refused})
    assert run.rc == 0, run.explain()
    results = {r["item"]["case"]: r for r in run.task("Placement requests")["results"]}
    for case, _request, expected in CASES:
        got = results[case]
        assert [dc["id"] for dc in got["placement"]] == expected, (case, got["placement"])
        assert got["data_center"] == (expected[0] if expected else None), case
    stockholm = results["stock-first"]["placement"][0]
    assert stockholm == {
        "id": "EU-SE-1",
        "name": "Stockholm 1",
        "availability": "HIGH",
        "network_volume_types": ["STANDARD"],
    }
    for result, (case, _request, expected) in zip(
        run.task("Requests the module refuses")["results"], REFUSED, strict=True
    ):
        assert result.get("failed") and expected in result["msg"], (case, result.get("msg"))
    assert run.task("The volume, where the runbook's request puts it")["network_volume"]["data_center"] == "EU-SE-1"
    [pod] = live_pods(emulator)
    assert pod["dataCenterId"] == "EU-SE-1" and run.task("A pod on it (placed in the volume's data center)")["created"]
    sent = recorded(emulator)
    queries = [r["query_string"] for r in sent if r["path"] == "/v2/catalog/gpus"]
    assert any("minCudaVersion=12.8" in q for q in queries), queries
    assert [r["path"] for r in sent if r["method"] in MUTATING] == ["/v2/network-volumes", "/v2/pods"]
    assert spec_violations(openapi, sent) == []
