# The reference trainer and checkpoint library (training/), and the checkpoint benchmark.
#   make training-test      the trainer's tests alone (make pytest runs them too, with everything else)
#   make training-smoke     one short run of the trainer in runs/training-smoke, then checkpoint_verify on it
#   make bench-checkpoint   benchmarks/checkpoint_bench.py (writes under CHECKPOINT_BENCH_DIR, a disk)
CHECKPOINT_BENCH_DIR ?= /var/tmp
TRAINING_SMOKE_DIR ?= $(ROOT)/runs/training-smoke

.PHONY: training-test training-smoke bench-checkpoint

training-test: setup
	@pytest training/tests

training-smoke: setup
	@mkdir -p "$(TRAINING_SMOKE_DIR)"
	@printf '%s\n' '{"run_id": "training-smoke", "steps": 200, "checkpoint": {"every_steps": 50, "keep_last": 2}}' \
		> "$(TRAINING_SMOKE_DIR)/config.json"
	@$(PY) -m trainops_train.train --config "$(TRAINING_SMOKE_DIR)/config.json" \
		--run-dir "$(TRAINING_SMOKE_DIR)"
	@# the module's output goes to a file, not through a pipe that would hide its exit status
	@ansible localhost -m trainops.gpu.checkpoint_verify -e ansible_python_interpreter=$(PY) \
		-a "path=$(TRAINING_SMOKE_DIR)/ckpt load=true require_valid=true" > "$(TRAINING_SMOKE_DIR)/verify.out" \
		|| { cat "$(TRAINING_SMOKE_DIR)/verify.out"; exit 1; }
	@head -5 "$(TRAINING_SMOKE_DIR)/verify.out"

bench-checkpoint: setup
	@$(PY) benchmarks/checkpoint_bench.py --dir "$(CHECKPOINT_BENCH_DIR)"
