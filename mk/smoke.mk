# The smoke run (playbooks/smoke.yml, docs/runpod_execution.md) on the local emulator: create a pod, bootstrap,
# push, train a few steps, pull and verify the newest checkpoint, terminate through the teardown gate.
#   make smoke                                   a new run id each time
#   make smoke SMOKE_RUN_ID=smoke-1              run again with the same id: a passed run is checked, not redone
#   make smoke SMOKE_ARGS='-e smoke_teardown=stop'   any other ansible-playbook arguments
# The emulator (podman backend, state in EMULATOR_STATE) is started when it is not running, and left running.
# The API URL and key are the emulator's, whatever RUNPOD_API_URL/RUNPOD_API_KEY say: a real key is never
# sent to it.
SMOKE_RUN_ID ?=
SMOKE_ARGS ?=

.PHONY: smoke

smoke: setup image
	@$(MAKE) --no-print-directory emulator-podman EMULATOR_FOR=smoke
	@$(EMULATOR_ENV) \
	ansible-playbook -i inventories/local.runpod.yml playbooks/smoke.yml \
		$(if $(SMOKE_RUN_ID),-e smoke_run_id=$(SMOKE_RUN_ID)) $(SMOKE_ARGS)
