"""The emulator's fixed catalog: a few GPU types, CPU flavors and data centers, and their listings.

Prices are USD per hour (GPU: per GPU; CPU: per vCPU). `memory_mib` is what nvidia-smi reports as
memory.total on the real card; the emulated GPUs inside pods report the same.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .problems import bad_request, not_found, unprocessable
from .schema import query_int


@dataclass(frozen=True)
class GpuType:
    id: str
    name: str
    memory_gb: int
    memory_mib: int
    secure_price: float
    community_price: float
    max_count: int
    community: bool = True
    cuda_versions: tuple[str, ...] = ("12.4", "12.6", "12.8")


@dataclass(frozen=True)
class CpuFlavor:
    id: str
    name: str
    group: str
    min_vcpu: int
    max_vcpu: int
    ram_gb_per_vcpu: float
    price_per_vcpu: float


@dataclass(frozen=True)
class DataCenter:
    id: str
    name: str
    region: str
    country: str
    cuda_version: str
    global_network: bool
    volume_types: tuple[str, ...]
    compliance: tuple[str, ...]
    # GPU type id -> availability level (NONE, LOW, MEDIUM, HIGH); absent means not offered here.
    gpus: dict[str, str] = field(default_factory=dict)
    cpu_availability: str = "HIGH"
    # Whether its COMMUNITY hosts have public IPs. Without, a pod placed there gets no public port for 22/tcp
    # (runtime.ports shows it with public and ip null) and never an ssh.direct, as on such RunPod hosts.
    community_public_ip: bool = True

    def public_ip(self, cloud: str) -> bool:
        """Whether a pod of `cloud` placed here gets a public IP (SECURE hosts always have one)."""
        return cloud != "COMMUNITY" or self.community_public_ip


GPU_TYPES: tuple[GpuType, ...] = (
    GpuType("NVIDIA H100 80GB HBM3", "H100 SXM", 80, 81559, 2.99, 2.69, 8, community=False),
    GpuType("NVIDIA A100 80GB PCIe", "A100 PCIe", 80, 81920, 1.64, 1.19, 8),
    GpuType("NVIDIA GeForce RTX 4090", "RTX 4090", 24, 24564, 0.69, 0.34, 8),
    GpuType("NVIDIA RTX A6000", "RTX A6000", 48, 49140, 0.49, 0.33, 8),
)

CPU_FLAVORS: tuple[CpuFlavor, ...] = (
    CpuFlavor("cpu3c", "Compute-Optimized", "cpu3", 2, 32, 2.0, 0.04),
    CpuFlavor("cpu3g", "General Purpose", "cpu3", 2, 32, 4.0, 0.03),
)

DATA_CENTERS: tuple[DataCenter, ...] = (
    DataCenter(
        "EU-RO-1",
        "Bucharest 1",
        "EUROPE",
        "RO",
        "12.8",
        True,
        ("STANDARD", "HIGH_PERFORMANCE"),
        ("GDPR", "ISO_IEC_27001"),
        {"NVIDIA H100 80GB HBM3": "HIGH", "NVIDIA GeForce RTX 4090": "MEDIUM"},
    ),
    DataCenter(
        "US-TX-3",
        "Dallas 3",
        "NORTH_AMERICA",
        "US",
        "12.4",
        False,
        ("STANDARD",),
        ("SOC_2_TYPE_2",),
        {"NVIDIA H100 80GB HBM3": "LOW", "NVIDIA A100 80GB PCIe": "HIGH"},
    ),
    DataCenter(
        "EU-SE-1",
        "Stockholm 1",
        "EUROPE",
        "SE",
        "12.6",
        True,
        ("STANDARD",),
        ("GDPR", "RENEWABLE"),
        {"NVIDIA GeForce RTX 4090": "HIGH", "NVIDIA RTX A6000": "NONE"},
        community_public_ip=False,
    ),
)

_CUDA = re.compile(r"[0-9]+\.[0-9]+")
_CUDA_FLOOR = re.compile(r"[0-9]+(\.[0-9]+)?")
_COUNTRY = re.compile(r"[A-Z]{2}")


def gpu_type(gpu_id: str) -> GpuType | None:
    return next((g for g in GPU_TYPES if g.id == gpu_id), None)


def cpu_flavor(flavor_id: str) -> CpuFlavor | None:
    return next((c for c in CPU_FLAVORS if c.id == flavor_id), None)


def data_center(dc_id: str) -> DataCenter | None:
    return next((d for d in DATA_CENTERS if d.id == dc_id), None)


def cuda_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _best_level(levels: list[str]) -> str:
    order = ["NONE", "LOW", "MEDIUM", "HIGH"]
    return max(levels, key=order.index) if levels else "NONE"


def _csv(query: dict[str, list[str]], name: str) -> list[str] | None:
    """A comma-separated list parameter (form style, explode=false); an empty item (`a,,b`, `,`, or an empty
    value, which is one empty item) is a 400 naming the parameter."""
    if name not in query:
        return None
    values: list[str] = []
    for raw in query[name]:
        items = [item.strip() for item in raw.split(",")]
        if not all(items):
            raise bad_request(f"{name}: {raw[:80]!r} has an empty item")
        values.extend(items)
    return values


def _enum_list(query: dict[str, list[str]], name: str, allowed: list[str]) -> list[str] | None:
    values = _csv(query, name)
    if values is None:
        return None
    wrong = [v for v in values if v not in allowed]
    if wrong:
        raise unprocessable([f"{name}: {w!r} is not one of {', '.join(allowed)}" for w in wrong])
    return values


@dataclass
class AvailabilityQuery:
    """The parsed include/product/count/cloud/... filters of the GPU and CPU catalog endpoints."""

    include: bool = False
    count: int = 1
    cloud: str = "SECURE"
    countries: list[str] | None = None
    cuda_versions: list[str] | None = None
    min_cuda: str | None = None
    vcpu_count: int | None = None


def parse_availability_query(query: dict[str, list[str]], products: list[str], for_cpu: bool) -> AvailabilityQuery:
    include = _enum_list(query, "include", ["AVAILABILITY"])
    if include is not None and len(include) > 1:
        raise unprocessable(["include: must have at most 1 items"])
    product = _enum_list(query, "product", products)
    wants = bool(include)
    if wants and not product:
        raise bad_request("product is required with include=AVAILABILITY")
    only_with_include = ["product", "vcpuCount"] if for_cpu else ["product", "count", "cloud", "countryCodes"]
    if not for_cpu:
        only_with_include += ["cudaVersions", "minCudaVersion"]
    if not wants:
        misplaced = [name for name in only_with_include if name in query]
        if misplaced:
            raise bad_request(f"{', '.join(misplaced)} valid only with include=AVAILABILITY")
    result = AvailabilityQuery(include=wants)
    if for_cpu:
        if "vcpuCount" in query:
            result.vcpu_count = query_int(query, "vcpuCount", 2, 2)
            if result.vcpu_count & (result.vcpu_count - 1):
                raise bad_request("vcpuCount must be a power of two")
        return result
    if "count" in query:
        result.count = query_int(query, "count", 1, 1)
    if "cloud" in query:
        cloud = query["cloud"][0]
        if cloud not in ("SECURE", "COMMUNITY"):
            raise unprocessable([f"cloud: {cloud!r} is not one of SECURE, COMMUNITY"])
        result.cloud = cloud
    result.countries = _csv(query, "countryCodes")
    for code in result.countries or []:
        if not _COUNTRY.fullmatch(code):
            raise unprocessable([f"countryCodes: {code!r} is not an uppercase ISO 3166-1 alpha-2 code"])
    result.cuda_versions = _csv(query, "cudaVersions")
    for version in result.cuda_versions or []:
        if not _CUDA.fullmatch(version):
            raise unprocessable([f"cudaVersions: {version!r} is not major.minor"])
    if "minCudaVersion" in query:
        result.min_cuda = query["minCudaVersion"][0]
        if not _CUDA_FLOOR.fullmatch(result.min_cuda):
            raise unprocessable([f"minCudaVersion: {result.min_cuda!r} is not major or major.minor"])
    if result.cuda_versions is not None and result.min_cuda is not None:
        raise bad_request("cudaVersions and minCudaVersion are mutually exclusive")
    return result


def _cuda_matches(version: str, query: AvailabilityQuery) -> bool:
    if query.cuda_versions is not None:
        return version in query.cuda_versions
    if query.min_cuda is not None:
        floor = cuda_tuple(query.min_cuda)
        return cuda_tuple(version)[: len(floor)] >= floor
    return True


def gpu_json(gpu: GpuType, query: AvailabilityQuery, single: bool = False) -> dict[str, Any] | None:
    body: dict[str, Any] = {
        "id": gpu.id,
        "name": gpu.name,
        "pool": None,
        "manufacturer": "NVIDIA",
        "memory": gpu.memory_gb,
        "secure": True,
        "community": gpu.community,
        "price": {"secure": gpu.secure_price, "community": gpu.community_price if gpu.community else 0.0},
        "maxCount": {"secure": gpu.max_count, "community": gpu.max_count if gpu.community else 0},
    }
    if not query.include:
        return body
    usable = query.count <= gpu.max_count and (query.cloud == "SECURE" or gpu.community)
    centers = []
    for dc in DATA_CENTERS:
        if gpu.id not in dc.gpus:
            continue
        if query.countries is not None and dc.country not in query.countries:
            continue
        level = dc.gpus[gpu.id] if usable and _cuda_matches(dc.cuda_version, query) else "NONE"
        centers.append({"id": dc.id, "name": dc.name, "availability": level})
    if not centers and not single:
        return None
    body["availability"] = _best_level([c["availability"] for c in centers])
    if centers:
        body["dataCenters"] = centers
    body["cudaVersions"] = [
        {"version": v, "available": any(dc["availability"] != "NONE" for dc in centers) and _cuda_matches(v, query)}
        for v in gpu.cuda_versions
        if query.cuda_versions is None or v in query.cuda_versions
    ]
    return body


def list_gpus(query: dict[str, list[str]]) -> dict[str, Any]:
    parsed = parse_availability_query(query, ["POD", "CLUSTER", "SERVERLESS"], for_cpu=False)
    gpus = [gpu_json(g, parsed) for g in GPU_TYPES]
    return {"gpus": [g for g in gpus if g is not None]}


def get_gpu(gpu_id: str, query: dict[str, list[str]]) -> dict[str, Any]:
    parsed = parse_availability_query(query, ["POD", "CLUSTER", "SERVERLESS"], for_cpu=False)
    gpu = gpu_type(gpu_id)
    if gpu is None:
        raise not_found("GPU type", gpu_id)
    return gpu_json(gpu, parsed, single=True) or {}


def cpu_json(cpu: CpuFlavor, query: AvailabilityQuery) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": cpu.id,
        "name": cpu.name,
        "group": cpu.group,
        "vcpu": {"min": cpu.min_vcpu, "max": cpu.max_vcpu},
        "ramGbPerVcpu": cpu.ram_gb_per_vcpu,
        "price": {"securePerVcpu": cpu.price_per_vcpu, "serverlessPerVcpu": round(cpu.price_per_vcpu * 1.5, 4)},
    }
    if query.include:
        fits = query.vcpu_count is None or cpu.min_vcpu <= query.vcpu_count <= cpu.max_vcpu
        centers = [
            {"id": dc.id, "name": dc.name, "availability": dc.cpu_availability if fits else "NONE"}
            for dc in DATA_CENTERS
        ]
        body["availability"] = _best_level([c["availability"] for c in centers])
        body["dataCenters"] = centers
    return body


def list_cpus(query: dict[str, list[str]]) -> dict[str, Any]:
    parsed = parse_availability_query(query, ["POD", "SERVERLESS"], for_cpu=True)
    return {"cpus": [cpu_json(c, parsed) for c in CPU_FLAVORS]}


def get_cpu(flavor_id: str, query: dict[str, list[str]]) -> dict[str, Any]:
    parsed = parse_availability_query(query, ["POD", "SERVERLESS"], for_cpu=True)
    cpu = cpu_flavor(flavor_id)
    if cpu is None:
        raise not_found("CPU flavor", flavor_id)
    return cpu_json(cpu, parsed)


_DC_INCLUDES = ["GPU_AVAILABILITY", "CPU_AVAILABILITY"]
_REGIONS = [
    "NORTH_AMERICA",
    "SOUTH_AMERICA",
    "EUROPE",
    "ASIA",
    "MIDDLE_EAST",
    "AFRICA",
    "OCEANIA",
    "ANTARCTICA",
    "UNKNOWN",
]
_COMPLIANCE = [
    "GDPR",
    "ISO_IEC_27001",
    "ISO_14001",
    "PCI_DSS",
    "HITRUST",
    "SOC_1_TYPE_2",
    "SOC_2_TYPE_2",
    "SOC_3_TYPE_2",
    "ITAR",
    "FISMA_HIGH",
    "HIPAA",
    "RENEWABLE",
]


def datacenter_json(dc: DataCenter, includes: list[str]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": dc.id,
        "name": dc.name,
        "region": dc.region,
        "globalNetwork": dc.global_network,
        "networkVolumeTypes": list(dc.volume_types),
        "compliance": list(dc.compliance),
    }
    if "GPU_AVAILABILITY" in includes:
        body["gpuAvailability"] = [
            {"id": gpu_id, "name": gpu_type(gpu_id).name, "availability": level}  # type: ignore[union-attr]
            for gpu_id, level in dc.gpus.items()
        ]
    if "CPU_AVAILABILITY" in includes:
        body["cpuAvailability"] = [
            {"id": cpu.id, "name": cpu.name, "availability": dc.cpu_availability} for cpu in CPU_FLAVORS
        ]
    return body


def list_datacenters(query: dict[str, list[str]]) -> dict[str, Any]:
    includes = _enum_list(query, "include", _DC_INCLUDES) or []
    regions = _enum_list(query, "regions", _REGIONS)
    volume_types = _enum_list(query, "networkVolumeTypes", ["STANDARD", "HIGH_PERFORMANCE"])
    compliance = _enum_list(query, "compliance", _COMPLIANCE)
    global_network = None
    if "globalNetwork" in query:
        raw = query["globalNetwork"][0]
        if raw not in ("true", "false"):
            raise unprocessable([f"globalNetwork: {raw!r} is not a boolean"])
        global_network = raw == "true"
    selected = []
    for dc in DATA_CENTERS:
        if regions is not None and dc.region not in regions:
            continue
        if volume_types is not None and not set(volume_types) <= set(dc.volume_types):
            continue
        if compliance is not None and not set(compliance) <= set(dc.compliance):
            continue
        if global_network is not None and dc.global_network != global_network:
            continue
        selected.append(datacenter_json(dc, includes))
    return {"dataCenters": selected}


def get_datacenter(dc_id: str, query: dict[str, list[str]]) -> dict[str, Any]:
    includes = _enum_list(query, "include", _DC_INCLUDES) or []
    dc = data_center(dc_id)
    if dc is None:
        raise not_found("data center", dc_id)
    return datacenter_json(dc, includes)
