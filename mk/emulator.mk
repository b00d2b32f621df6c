# The RunPod v2 emulator (emulator/runpod_emulator): background server for local runs, and its benchmark.
#   make emulator-start   podman backend, state in state/emulator, key from EMULATOR_API_KEY or generated
#   make emulator-stop    stop it (its pods' containers keep running; the next start adopts them)
#   make bench-emulator   benchmarks/emulator_bench.py
EMULATOR_STATE ?= $(ROOT)/state/emulator
EMULATOR_PORT ?= 0
EMULATOR_BACKEND ?= podman

.PHONY: emulator-start emulator-stop emulator-status emulator-podman bench-emulator

# emulator-podman: start the emulator with the podman backend when it is not running, and refuse one that runs
# another backend. The first step of the targets that run playbooks on its pods (smoke, drill, bench):
#   @$(MAKE) --no-print-directory emulator-podman EMULATOR_FOR=smoke
# (a target, not a $(call): a literal $(MAKE) line is what "make -n" runs, and only that line).
EMULATOR_FOR ?= emulator-podman

emulator-podman:
	@$(MAKE) --no-print-directory emulator-start EMULATOR_BACKEND=podman
	@backend=$$($(PY) -c 'import json,sys; print(json.load(open(sys.argv[1])).get("backend", ""))' "$(EMULATOR_STATE)/emulator.json"); \
	if [ "$$backend" != podman ]; then \
		echo "$(EMULATOR_FOR): the emulator in $(EMULATOR_STATE) runs the $$backend backend; pods need podman (make emulator-stop first)" >&2; \
		exit 1; fi

# The environment that points a command at the running emulator: its state dir, URL and key, whatever
# RUNPOD_API_URL/RUNPOD_API_KEY say (a real key is never sent to it). Use: @$(EMULATOR_ENV) \ ansible-playbook ...
EMULATOR_ENV = RUNPOD_EMULATOR_STATE_DIR="$(EMULATOR_STATE)" \
	RUNPOD_API_URL="$$($(PY) -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$(EMULATOR_STATE)/emulator.json")" \
	RUNPOD_API_KEY="$$(cat "$(EMULATOR_STATE)/api-key")"

emulator-start: setup
	@mkdir -p "$(EMULATOR_STATE)"; \
	if [ -f "$(EMULATOR_STATE)/emulator.pid" ] && kill -0 "$$(cat "$(EMULATOR_STATE)/emulator.pid")" 2>/dev/null; then \
		echo "emulator: already running (pid $$(cat "$(EMULATOR_STATE)/emulator.pid"))"; exit 0; fi; \
	umask 077; key_file="$(EMULATOR_STATE)/api-key"; \
	if [ -n "$${EMULATOR_API_KEY:-}" ]; then printf '%s\n' "$$EMULATOR_API_KEY" > "$$key_file"; \
	elif [ ! -s "$$key_file" ]; then $(PY) -c 'import secrets; print("emu-" + secrets.token_hex(16))' > "$$key_file"; fi; \
	chmod 600 "$$key_file"; \
	rm -f "$(EMULATOR_STATE)/emulator.json"; \
	nohup $(PY) -m runpod_emulator serve --host 127.0.0.1 --port $(EMULATOR_PORT) \
		--state-dir "$(EMULATOR_STATE)" --backend $(EMULATOR_BACKEND) --api-key-file "$$key_file" \
		>> "$(EMULATOR_STATE)/emulator.out" 2>&1 & echo $$! > "$(EMULATOR_STATE)/emulator.pid"; \
	for _i in $$(seq 1 300); do \
		if [ -s "$(EMULATOR_STATE)/emulator.json" ]; then break; fi; \
		if ! kill -0 "$$(cat "$(EMULATOR_STATE)/emulator.pid")" 2>/dev/null; then \
			echo "emulator: failed to start:"; tail -5 "$(EMULATOR_STATE)/emulator.out"; exit 1; fi; \
		sleep 0.1; done; \
	if [ ! -s "$(EMULATOR_STATE)/emulator.json" ]; then echo "emulator: no answer within 30 s"; exit 1; fi; \
	echo "emulator: $$($(PY) -c 'import json,sys; print(json.load(open(sys.argv[1]))["api_url"])' "$(EMULATOR_STATE)/emulator.json") (pid $$(cat "$(EMULATOR_STATE)/emulator.pid"), key in $$key_file)"

emulator-stop:
	@pid_file="$(EMULATOR_STATE)/emulator.pid"; \
	if [ ! -f "$$pid_file" ]; then echo "emulator: not running"; exit 0; fi; \
	pid=$$(cat "$$pid_file"); \
	if kill -0 "$$pid" 2>/dev/null; then kill -TERM "$$pid"; \
		for _i in $$(seq 1 100); do kill -0 "$$pid" 2>/dev/null || break; sleep 0.1; done; \
		if kill -0 "$$pid" 2>/dev/null; then kill -KILL "$$pid"; fi; fi; \
	rm -f "$$pid_file"; echo "emulator: stopped (pid $$pid)"

emulator-status:
	@if [ -f "$(EMULATOR_STATE)/emulator.pid" ] && kill -0 "$$(cat "$(EMULATOR_STATE)/emulator.pid")" 2>/dev/null; then \
		cat "$(EMULATOR_STATE)/emulator.json"; else echo "emulator: not running"; fi

bench-emulator: setup
	@$(PY) benchmarks/emulator_bench.py
