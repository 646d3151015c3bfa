# kimi.deploy developer entry points. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Pinned interpreter: the machine's default python3 (3.11) resolves an older Ansible.
PYTHON ?= $(shell for p in python3.12 /root/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12; do \
	$$p -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null && { echo $$p; break; }; done)
VENV := .venv
BIN := $(VENV)/bin
COLLECTION_LINK := .collections/ansible_collections/kimi/deploy
export PATH := $(CURDIR)/$(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# Bytecode is written (into .venv and __pycache__/, which git and the collection build ignore) even where the
# environment says PYTHONDONTWRITEBYTECODE=1, as this machine's does: every ansible-playbook, worker, ansible-lint and
# pytest process otherwise compiled each module it imported from source again (a third of ansible-lint's CPU;
# ansible-lint 234 s -> 163 s on a cold cache).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help setup demo-setup demo demo-plan demo-bench bench-client router-client docs-venv docs ee demo-clean lint sanity unit test plan build bench bench-proxy bench-converge bench-fleet bench-switch bench-gateway clean engine-flags engine-metrics site-specs readme probes-from-vendor

help:  ## List targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-15s %s\n", $$1, $$2}'

# Two stamps: the demo's few packages (requirements-demo.txt), and the whole test toolchain on top of them.
# --no-compile: the `ansible` package ships ~40k Python files, most never imported; Python compiles what it imports
# (and keeps it: see PYTHONDONTWRITEBYTECODE above).
$(BIN)/.stamp-demo: requirements-demo.txt
	@test -n "$(PYTHON)" || { echo "Python 3.12 not found: set PYTHON=/path/to/python3.12" >&2; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --no-compile --disable-pip-version-check -r requirements-demo.txt
	touch $@

$(BIN)/.stamp: $(BIN)/.stamp-demo requirements-dev.txt
	$(BIN)/pip install -q --no-compile --disable-pip-version-check -r requirements-dev.txt
	touch $@

$(COLLECTION_LINK):
	mkdir -p $(dir $@)
	ln -sfn ../../.. $@

# `ansible --version | head -1` broke its pipe in about half of the runs (a traceback): print the first line in Python.
setup: $(BIN)/.stamp $(COLLECTION_LINK)  ## Make the virtualenv with the test toolchain and link this checkout as kimi.deploy
	@$(BIN)/python -c 'import ansible.release as r; print("ansible-core", r.__version__)'

demo-setup: $(BIN)/.stamp-demo $(COLLECTION_LINK)  ## Only what make demo needs (a subset of make setup)
	@$(BIN)/python -c 'import ansible.release as r; print("ansible-core", r.__version__)'

demo: demo-setup  ## The main job on the embedded default: site.yml on a local container GPU host, then a client through Caddy (MODEL=, QUANT=, ENGINE=, GPUS=, SPEC=, ARGS=)
	MODEL='$(MODEL)' QUANT='$(QUANT)' ENGINE='$(ENGINE)' GPUS='$(GPUS)' SPEC='$(SPEC)' KIMI_DEMO_ARGS='$(ARGS)' demo/demo.sh up

demo-plan: demo-setup  ## site.yml --check --diff on the demo host: the plan for MODEL= QUANT= ENGINE=, nothing changed
	MODEL='$(MODEL)' QUANT='$(QUANT)' ENGINE='$(ENGINE)' GPUS='$(GPUS)' SPEC='$(SPEC)' KIMI_DEMO_ARGS='$(ARGS)' demo/demo.sh plan

demo-bench: setup bench-client  ## Benchmark the demo through Caddy (playbooks/bench.yml, aiperf): prints where its JSON and PNG are
	demo/demo.sh bench

bench-client: .venv-bench/.stamp  ## The benchmark client (aiperf, pinned in requirements-bench.txt) in .venv-bench

.venv-bench/.stamp: requirements-bench.txt
	@test -n "$(PYTHON)" || { echo "Python 3.12 not found: set PYTHON=/path/to/python3.12" >&2; exit 1; }
	$(PYTHON) -m venv .venv-bench
	.venv-bench/bin/pip install -q --disable-pip-version-check --no-compile -r requirements-bench.txt
	touch $@

docs-venv: .venv-docs/.stamp  ## The documentation toolchain (antsibull-docs, Sphinx; pinned in requirements-docs.txt) in .venv-docs

.venv-docs/.stamp: requirements-docs.txt
	@test -n "$(PYTHON)" || { echo "Python 3.12 not found: set PYTHON=/path/to/python3.12" >&2; exit 1; }
	$(PYTHON) -m venv .venv-docs
	.venv-docs/bin/pip install -q --disable-pip-version-check --no-compile -r requirements-docs.txt
	touch $@

docs: setup docs-venv  ## The collection's documentation site (modules, filters, roles) with antsibull-docs into build/docs
	tools/build_docs.sh

ee: setup  ## The AWX/Automation Platform execution environment's build context (ansible-builder create) in build/ee/context
	rm -rf build/ee && mkdir -p build/ee
	$(BIN)/ansible-galaxy collection build --force --output-path build/ee . >/dev/null
	mv build/ee/kimi-deploy-*.tar.gz build/ee/kimi-deploy.tar.gz
	$(BIN)/ansible-builder create -f execution-environment.yml --context build/ee/context --output-filename Containerfile
	@echo "ee: build/ee/context (then: ansible-builder build -f execution-environment.yml -t kimi-deploy-ee:1.1.0)"

router-client: .venv-router/.stamp  ## The routers (SMG, vllm-router, pinned in requirements-router.txt) in .venv-router, for the tests

.venv-router/.stamp: requirements-router.txt
	@test -n "$(PYTHON)" || { echo "Python 3.12 not found: set PYTHON=/path/to/python3.12" >&2; exit 1; }
	$(PYTHON) -m venv .venv-router
	.venv-router/bin/pip install -q --disable-pip-version-check --no-compile -r requirements-router.txt
	touch $@

demo-clean:  ## Remove everything make demo made (the host, its volumes, .demo/)
	demo/demo.sh clean

# Make variables are passed quoted (QUANT='int4 -e x=1' is one value, refused by name); GPUS= must name a profile.
plan: setup  ## Resolve and print a deployment, no host needed (MODEL=kimi-k2.6|kimi-k2.7-code|kimi-k3, QUANT=, ENGINE=, GPUS=profile, HOSTS=hosts in one replica, PD=1P1D disaggregated, FLEET=2 hosts behind a gateway, SPEC=eagle3 speculative, ARGS=more -e); exits 2 when it does not fit
	@gpus='$(or $(GPUS),rtx-pro-6000-x8)'; test -f "tests/fixtures/gpus/$$gpus.json" || { \
		echo "GPUS=$$gpus is not a GPU profile. Allowed values: $$(cd tests/fixtures/gpus && ls -- *.json | sed 's/\.json$$//' | tr '\n' ' ')" >&2; exit 2; }
	$(BIN)/ansible-playbook playbooks/plan.yml -e 'kimi_model=$(or $(MODEL),kimi-k2.6)' \
		-e 'quant=$(or $(QUANT),auto)' -e 'engine=$(or $(ENGINE),auto)' \
		-e '@tests/fixtures/gpus/$(or $(GPUS),rtx-pro-6000-x8).json' -e 'kimi_replica_plan_hosts=$(or $(HOSTS),1)' \
		$(if $(PD),-e 'kimi_pd_plan=$(PD)') $(if $(FLEET),-e 'kimi_fleet_plan=$(FLEET)') $(if $(SPEC),-e 'kimi_speculative=$(SPEC)') $(ARGS)

lint: setup  ## yamllint + ansible-lint (production profile) + changelog fragments
	$(BIN)/yamllint --strict .
	$(BIN)/ansible-lint --profile production
	$(BIN)/antsibull-changelog lint
	$(BIN)/antsibull-changelog lint-changelog-yaml changelogs/changelog.yaml

sanity: setup  ## ansible-test sanity on a copy laid out as ansible_collections/kimi/deploy
	tests/sanity.sh

unit: setup  ## Unit and playbook tests (pytest)
	$(BIN)/pytest -q tests/unit tests/integration

test: setup  ## Everything CI runs: lint, sanity, build, pytest, make demo end to end, molecule
	tests/run-all.sh

build: setup  ## Build the collection tarball into build/
	$(BIN)/ansible-galaxy collection build --force --output-path build .

bench: setup  ## Download benchmark: hf_snapshot vs huggingface_hub on the fake hub (ARGS="--size 16GiB --connections 24")
	$(BIN)/python bench/hf_download.py $(ARGS)

bench-proxy: setup  ## Latency Caddy adds, direct vs proxied (converges and keeps the molecule caddy_proxy instance)
	env -u ANSIBLE_CONFIG $(BIN)/molecule converge -s caddy_proxy >/dev/null
	docker exec -i kimi-caddy python3 - $(ARGS) < bench/caddy_latency.py

bench-fleet: setup  ## Fleet weights: N hosts from the hub vs with peers, and a peer transfer vs dd conv=fsync (ARGS="--hosts 4")
	$(BIN)/python bench/fleet_weights.py $(ARGS)

bench-switch: setup  ## Switch window, stop to first answer, shards cold vs warm in the page cache (engine double)
	$(BIN)/python bench/switch_window.py $(ARGS)

bench-gateway: bench-client  ## Fleet endpoint's token path: events/s, added delay, CPU per 1000 tokens of Caddy, usage tap, SMG (ARGS="--duration 4")
	.venv-bench/bin/python bench/gateway.py $(ARGS)

bench-converge: setup  ## Converge benchmark: first, no-op and switch runs of site.yml, 1 host vs a fleet (HOSTS=8; ARGS=--only 1)
	$(BIN)/python bench/converge.py --hosts $(or $(HOSTS),8) $(ARGS)

clean:  ## Remove the virtualenv, the collection link and build output
	rm -rf $(VENV) .collections build

site-specs:  ## Write playbooks/vars/site_argument_specs.yml from the site inputs table (plugins/module_utils/_model/site_inputs.py)
	$(BIN)/python tools/site_specs.py

probes-from-vendor:  ## Convert the vendor verifier's JSONL test set into a probe file for kimi_verify_probe_file (IN=samples.jsonl OUT=my-probes.yml)
	@test -n "$(IN)" -a -n "$(OUT)" || { echo "usage: make probes-from-vendor IN=samples.jsonl OUT=my-probes.yml [ARGS=--limit 200]" >&2; exit 1; }
	$(BIN)/python tools/probes_from_vendor.py $(IN) $(OUT) $(ARGS)

readme:  ## Rewrite the README's support matrix from the engine data (tools/support_matrix.py; a unit test compares them)
	$(or $(wildcard $(BIN)/python),$(PYTHON)) tools/support_matrix.py --write

engine-flags:  ## Flag list of a released engine (PyPI wheel, or ARGS="--source DIR ...") + its module (ENGINE=vllm|sglang|trtllm|smg|vllm-router VERSION=x.y.z)
	@test -n "$(ENGINE)" -a -n "$(VERSION)" || { echo "usage: make engine-flags ENGINE=vllm VERSION=0.33.0 [ARGS=...]" >&2; exit 1; }
	$(or $(wildcard $(BIN)/python),$(PYTHON)) tools/engine_flags.py --engine $(ENGINE) --version $(VERSION) $(ARGS)
	$(or $(wildcard $(BIN)/python),$(PYTHON)) tools/gen_flag_modules.py
	@test ! -e plugins/module_utils/_engines/$(ENGINE).py || echo "next: add $(VERSION) to the versions of plugins/module_utils/_engines/$(ENGINE).py (image, verified, notes), then make readme"

# The wheels are make engine-flags' (.cache/engine-flags/wheels); tests/unit/test_engine_metrics.py checks the dashboard,
# the alert rules, the canary's series and the engine double against the files this writes.
engine-metrics:  ## Series names every pinned engine/router release defines, read from its wheel, into tests/fixtures/engine_metrics (ENGINE= VERSION= for one)
	@test -z "$(ENGINE)$(VERSION)" -o -n "$(ENGINE)" -a -n "$(VERSION)" || { echo "usage: make engine-metrics [ENGINE=vllm VERSION=0.33.0] [ARGS=...]" >&2; exit 1; }
	$(or $(wildcard $(BIN)/python),$(PYTHON)) tools/engine_metrics.py $(if $(ENGINE),--engine $(ENGINE) --version $(VERSION)) $(ARGS)
