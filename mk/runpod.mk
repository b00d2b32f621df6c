# RunPod modules, inventory and their tests (issue 5).
.PHONY: runpod-version runpod-integration runpod-bench

# galaxy.yml holds the collection version; AnsiballZ payloads cannot read it, so the User-Agent's copy in
# plugins/module_utils/_version.py is rewritten from it here (a unit test fails when the two differ).
runpod-version:
	@version=$$($(PY) -c 'import yaml; print(yaml.safe_load(open("galaxy.yml"))["version"])'); \
	sed -i -E "s/^COLLECTION_VERSION = \".*\"/COLLECTION_VERSION = \"$$version\"/" plugins/module_utils/_version.py; \
	grep -n '^COLLECTION_VERSION' plugins/module_utils/_version.py

# Integration: the modules and the inventory through real ansible-playbook / ansible-inventory / ansible runs
# against the emulator (memory backend; the tests marked podman use real pod containers).
runpod-integration: setup image
	@pytest -p no:cacheprovider tests/integration/runpod

TEST_TARGETS += runpod-integration

# Inventory over 1,000 emulated pods: API calls (uncached, cached) and parse time against a static baseline.
runpod-bench: setup
	@$(PY) benchmarks/inventory_bench.py
