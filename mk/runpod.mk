# RunPod modules, inventory and their tests (issue 5).
.PHONY: runpod-integration runpod-bench

# Integration: the modules and the inventory through real ansible-playbook / ansible-inventory / ansible runs
# against the emulator (memory backend; the tests marked podman use real pod containers).
runpod-integration: setup image
	@pytest -p no:cacheprovider $(PYTEST_XDIST) tests/integration/runpod

TEST_TARGETS += runpod-integration

# Inventory over 1,000 emulated pods: API calls (uncached, cached) and parse time against a static baseline.
runpod-bench: setup
	@$(PY) benchmarks/inventory_bench.py
