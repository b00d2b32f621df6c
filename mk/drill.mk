# The resume drill (playbooks/resume_drill.yml, docs/resume_drill.md) on the local emulator.
#   make drill                                     all six modes; exits non-zero when any mode fails
#   make drill MODES=kill,sigterm                  the modes named, in this order
#   make drill EXAMPLE=plain                       a trainer of training/examples/<name>/ (its drill.yml)
#   make drill DRILL_ARGS='-e resume_drill_keep=true -e resume_drill_run_id=mine'
#   make bench-drill                               benchmarks/drill_bench.py: where the drill's time goes
# The emulator (podman backend, state in EMULATOR_STATE) is started when it is not running, and left running.
# The API URL and key are the emulator's, whatever RUNPOD_API_URL/RUNPOD_API_KEY say: a real key is never
# sent to it.
DRILL_ARGS ?=
# Modes, comma-separated (the role splits the string); empty: resume_drill_modes auto.
MODES ?=
# An example trainer (training/examples/<EXAMPLE>/drill.yml holds its drill settings); empty: the reference.
EXAMPLE ?=
EXAMPLES := $(sort $(notdir $(patsubst %/drill.yml,%,$(wildcard training/examples/*/drill.yml))))

.PHONY: drill bench-drill

ifneq ($(EXAMPLE),)
ifeq ($(filter $(EXAMPLE),$(EXAMPLES)),)
$(error EXAMPLE=$(EXAMPLE): no training/examples/$(EXAMPLE)/drill.yml; the examples: $(EXAMPLES))
endif
endif

drill: setup image
	@$(MAKE) --no-print-directory emulator-podman EMULATOR_FOR=drill
	@$(EMULATOR_ENV) \
	ansible-playbook -i inventories/local.runpod.yml playbooks/resume_drill.yml \
	  $(if $(EXAMPLE),-e @training/examples/$(EXAMPLE)/drill.yml) \
	  $(if $(MODES),-e resume_drill_modes='$(MODES)') $(DRILL_ARGS)

bench-drill: setup image
	@$(MAKE) --no-print-directory emulator-start EMULATOR_BACKEND=podman
	@$(PY) benchmarks/drill_bench.py --emulator-state "$(EMULATOR_STATE)" $(DRILL_ARGS)
