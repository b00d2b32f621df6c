# The run-with-evidence benchmark (playbooks/bench.yml, docs/bench.md) on the local emulator.
#   make bench                                       a small default command on an emulated GPU pod
#   make bench BENCH_COMMAND='python3 my_bench.py'   another command (run in the pushed source, runs/<id>/)
#   make bench BENCH_ARGS='-e bench_keep_pod=true'   any other ansible-playbook arguments
# The emulator (podman backend, state in EMULATOR_STATE) is started when it is not running, and left running.
# The API URL and key are the emulator's, whatever RUNPOD_API_URL/RUNPOD_API_KEY say: a real key is never
# sent to it.
BENCH_COMMAND ?= python3 -c 'import time; block = bytearray(64 << 20); print("allocated", len(block), "bytes", flush=True); time.sleep(8); print("done")'
BENCH_ARGS ?=
export BENCH_COMMAND

.PHONY: bench

bench: setup image
	@$(MAKE) --no-print-directory emulator-podman EMULATOR_FOR=bench
	@$(EMULATOR_ENV) \
	ansible-playbook -i inventories/local.runpod.yml playbooks/bench.yml \
		-e "$$($(PY) -c 'import json,os; print(json.dumps({"bench_command": os.environ["BENCH_COMMAND"]}))')" $(BENCH_ARGS)
