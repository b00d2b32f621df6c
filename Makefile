# trainops.gpu: every target sets up what it needs. `make drill` runs the main job on
# the emulator; `make test` runs every test.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

ROOT := $(CURDIR)
VENV := $(ROOT)/.venv
PY := $(VENV)/bin/python
COLLECTION_DIR := $(ROOT)/collections/ansible_collections/trainops/gpu

# Podman reads only the project's containers.conf: nothing under /etc is edited.
export CONTAINERS_CONF := $(ROOT)/config/containers.conf
export ANSIBLE_COLLECTIONS_PATH := $(ROOT)/collections
export PATH := $(VENV)/bin:$(PATH)

.PHONY: help setup doctor version image test check drill lint sanity units pytest pytest-check clean

# Each part of the project adds its targets in mk/<part>.mk, and its test targets to TEST_TARGETS.
TEST_TARGETS :=
-include mk/*.mk

help:
	@echo "make setup   install everything a fresh machine needs (apt, .venv, collections)"
	@echo "make doctor  check that this machine can run pods as the tests and the drill do"
	@echo "make image   build the local pod image (reused when its inputs are unchanged)"
	@echo "make test    every test: lint, ansible-test sanity and units, pytest, molecule, integration"
	@echo "make check   the inner loop while working: lint, units, the tests that need no pod (not slow)"
	@echo "make drill   the resume drill against the emulator"
	@echo "make lint    ruff, shellcheck, ansible-lint (production profile)"
	@echo "make sanity  ansible-test sanity"
	@echo "make clean   remove build outputs (keeps .venv and the image)"

# `make test` and `make check` run setup and the image once, first, then every other target with
# TRAINOPS_SETUP_DONE=1: targets that run at the same time never run setup.sh or build.sh at the same time.
setup:
	@if [ -z "$${TRAINOPS_SETUP_DONE:-}" ]; then scripts/setup.sh && $(MAKE) --no-print-directory doctor; fi

# The self-check setup ends with: host programs, and a pod of the local image started with the emulator's
# own podman arguments, reached over SSH (skipped, saying so, until `make image` has built the image).
doctor:
	@$(PY) -m runpod_emulator.doctor

# galaxy.yml holds the version. Two copies must exist as text where galaxy.yml cannot be read: the
# User-Agent's (AnsiballZ payloads carry no galaxy.yml) and training/pyproject.toml (a training/ tree
# installed on its own). This rewrites both; tests/e2e/test_version.py fails when any copy differs. The
# emulator's package version is read from galaxy.yml at build time, the packages' __version__ from
# their installed metadata.
version:
	@v=$$(sed -nE 's/^version:[[:space:]]*([^[:space:]#]+).*/\1/p' galaxy.yml); test -n "$$v"; \
	sed -i -E "s/^COLLECTION_VERSION = \".*\"/COLLECTION_VERSION = \"$$v\"/" plugins/module_utils/_version.py; \
	sed -i -E "s/^version = \".*\"/version = \"$$v\"/" training/pyproject.toml; \
	echo "version: $$v in galaxy.yml, plugins/module_utils/_version.py, training/pyproject.toml"

image: setup
	@# Old tags of the pod image only take disk; one still in use by a container stays.
	@if [ -z "$${TRAINOPS_SETUP_DONE:-}" ]; then \
		emulator/image/build.sh; \
		current=localhost/trainops-pod:$$(emulator/image/tag.sh); \
		for old in $$(podman images --format '{{.Repository}}:{{.Tag}}' --filter reference=localhost/trainops-pod); do \
			if [ "$$old" != "$$current" ] && podman rmi "$$old" >/dev/null 2>&1; then echo "image: removed old $$old"; fi; \
		done; \
	fi

lint: setup
	@echo "lint: ruff"; ruff check . && ruff format --check .
	@echo "lint: shellcheck"; git ls-files '*.sh' .ci/run | xargs shellcheck
	@# ANSIBLE_HOME of its own: a copy of trainops.gpu installed under ~/.ansible/collections (a stale one, say)
	@# would shadow this checkout (./collections) and fail on modules it lacks.
	@echo "lint: ansible-lint"; mkdir -p .cache/ansible-lint-home && \
		ANSIBLE_HOME=$(ROOT)/.cache/ansible-lint-home ansible-lint --offline --profile production

sanity: setup
	@scripts/ansible_test.sh sanity --python 3.11 --color no

units: setup
	@if [ -d tests/unit ]; then scripts/ansible_test.sh units --python 3.11 --color no --requirements; \
	else echo "units: no tests/unit yet"; fi

# pytest's roots on PYTEST_WORKERS processes (pytest-xdist), one test module per process at a time (--dist loadfile):
# a module's fixtures (one emulator, one pod) still serve all of its tests. PYTEST_WORKERS=0: one process. Tests
# marked serial (pyproject.toml) run afterwards in one process. The 40 slowest phases are listed at the end.
PYTEST_WORKERS ?= 2
# --no-loadscope-reorder: modules go out in collection order (tests/e2e/conftest.py puts the slowest first), not
# by their number of tests.
PYTEST_XDIST = $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder)

pytest: setup image
	@pytest $(PYTEST_XDIST) -m "not serial" --durations=40
	@pytest -p no:cacheprovider -m serial

# make test: setup and the image once, then two lanes at the same time: pytest's roots, and lint, sanity, units and
# every suite the parts add to TEST_TARGETS (mk/*.mk), one after another. At the end a table of each target's wall
# time (also in tests/output/make-test/test/times.json); the exit status is 1 when any target failed.
empty :=
space := $(empty) $(empty)
TEST_LANES ?= pytest lint+sanity+units$(if $(TEST_TARGETS),+$(subst $(space),+,$(strip $(TEST_TARGETS))))

test:
	@python3 scripts/run_targets.py --name test --first setup --first image $(TEST_LANES)

# make check: the inner loop while working (docs/development.md). lint, units, and every pytest test that needs no
# pod (memory backend, the trainer, the docs) and is not marked slow, all four test roots, at the same time.
CHECK_PYTEST_ROOTS := tests/e2e emulator/tests training/tests tests/integration/runpod

pytest-check: setup
	@pytest -p no:cacheprovider $(PYTEST_XDIST) -m "not podman and not slow and not serial" $(CHECK_PYTEST_ROOTS)

check:
	@python3 scripts/run_targets.py --name check --first setup pytest-check lint+units

clean:
	rm -rf tests/output .pytest_cache .ruff_cache runs
	find . -name __pycache__ -type d -prune -not -path './.venv/*' -exec rm -rf {} +
