# Molecule scenarios of the roles (extensions/molecule/<role>/, podman containers of the local pod image).
#   make molecule-sync   the sync role: push, pull, idempotence, testinfra verify (about 1-2 minutes)
#   make molecule-bootstrap   the bootstrap role: a 2-GPU pod and one back without its GPUs, check mode,
#                             idempotence, testinfra verify (about 50 s)
#   make molecule-train   the train role: start, attach, SIGTERM (75), resume with progress, refused config,
#                         check mode, idempotence, testinfra verify (70-115 s with the load)
#   make molecule-provision   the provision role on its own emulator: key, network volume, pod, SSH wait, check
#                             mode (nothing created), idempotence (nothing changed), testinfra verify (about 55 s)
.PHONY: molecule-sync molecule-bootstrap molecule-train molecule-provision

# Run from the collection root: molecule finds a collection's scenarios under extensions/molecule/.
molecule-sync: setup image
	@molecule test -s sync

TEST_TARGETS += molecule-sync

molecule-bootstrap: setup image
	@molecule test -s bootstrap

TEST_TARGETS += molecule-bootstrap

molecule-train: setup image
	@molecule test -s train

TEST_TARGETS += molecule-train

molecule-provision: setup image
	@molecule test -s provision

TEST_TARGETS += molecule-provision

# Benchmark (not a test): the role's push of a 200 MB tree to an emulator pod against plain rsync -a.
.PHONY: bench-sync
bench-sync: setup image
	@$(PY) benchmarks/sync_bench.py
