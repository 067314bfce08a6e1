# The two commands of the README: `make demo` and `make test`. Both do their own set-up (tools/setup.sh).
SHELL := /bin/bash
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/.collections
PLAYBOOK := $(BIN)/ansible-playbook
# Every scenario, one after another (`make molecule`; one alone: `make molecule SCENARIOS=worker`).
SCENARIOS ?= worker default lsyncd shards mesh cluster controller_user
# `make test` runs its lanes through tools/molecule_lanes.sh (logs in tests/output/molecule/), each lane's items one
# after another (a scenario, SCENARIO:STEP,... for some of its molecule steps, or make:TARGET). First the worker
# scenario up to its converge, which builds llama.cpp once into the controller's cache (a fresh machine spends most of
# its first quarter hour there), and beside it the cluster scenario's lab booted and prepared (no build needed: the
# longest lane then starts at its converge); beside both, from the start and at a lower priority, the checks
# (BESIDE_LANES). Once the build is in the cache, the LANES, all at once: the rest of the cluster and worker scenarios,
# the other scenarios, `make:integration` (the integration tests, which use that build), then `make:matrix`: unit and
# sanity tests on the older ansible-core releases meta/runtime.yml admits (tools/ansible_matrix.sh; the .venv runs the
# newest, 2.21 on Python 3.13, for everything else: tools/ansible_versions.sh). All at nice 0: the other lanes at nice
# 5 behind the cluster's (tools/molecule_lanes.sh --behind) made them the longest instead (docs/development.md).
BESIDE_LANES ?= "make:lint make:unit"
FIRST_LANES ?= "worker:destroy,converge" "cluster:destroy,create,prepare"
LANES ?= "cluster:converge,idempotence,verify,destroy" "worker:idempotence,verify,destroy shards" "lsyncd default mesh controller_user" "make:integration make:matrix"
# Mesh provider of the demo: none (lab addresses), wireguard (make demo MESH=wireguard) or tailscale.
MESH ?= none
comma := ,
empty :=
space := $(empty) $(empty)

.PHONY: demo noop-profile bench bench-lab bench-switch bench-down test test-cluster test-webui setup lint ruff yamllint ansible-lint sanity unit integration matrix molecule molecule-lanes lab-up lab-down clean

demo: setup
	$(PLAYBOOK) -i localhost, lab/playbooks/lab_up.yml
	$(PLAYBOOK) lab/playbooks/demo.yml -e llamarpc_mesh_provider=$(MESH)

# After `make demo`, on its lab: a no-op site.yml, the same with --check, and Ansible's floor (ten pings), each timed
# per role by the timings callback, priced in floor-tasks (lab/tools/noop_profile.py; figures in tests/output/noop-profile).
noop-profile: setup
	$(BIN)/python lab/tools/noop_profile.py --mesh $(MESH)

# The benchmark on its own lab (lab/benchmarks/lab.yml: six hosts, coordinator link capped at 100 Mbit/s): cluster
# deployed with the model BENCH_MODEL, then playbooks/benchmark.yml; report in benchmarks/results/<time>/. Not part of
# `make test`. BENCH_MODEL is `cache` (lab/tools/tiny_gguf.py's preset: synthetic, every block matrix over the RPC tensor
# cache's 10 MiB) or `real` (Gemma 3 270M Q4_K_M from PyPI, lab/playbooks/real_model.yml; its settings in
# lab/benchmarks/real.yml). BENCH_ARGS passes more options (e.g. -e llama_benchmark_repeats=5, or
# -e '{"llama_benchmark_configurations": ["single", "B-planned-cold", "B-planned-warm", "B-planned-seeded"]}' for those
# alone). B-planned-seeded empties the planned workers' tensor caches, seeds them as the coordinator role does (a
# shard a worker lacks comes from the controller's copy, served by nginx on the lab bridge, not through node1) and
# loads; its ratios to the cold and warm loads and the bytes node1 sent are in the report, and so is the seed's case on
# paper (tools/seed_paper.py --json). `make bench-down` removes the lab.
BENCH_INVENTORY := inventories/bench/hosts.yml
BENCH_MODEL ?= cache
# The real model as lab/playbooks/real_model.yml fetches it (the user's cache), from which make bench cuts the lab's draft.
REAL_MODEL = $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/llamarpc/real-model/gemma-3-270m-q4_k_m.gguf
BENCH_VARS := lab/benchmarks/cluster.yml $(if $(filter real,$(BENCH_MODEL)),lab/benchmarks/real.yml)
# The bench lab up, its model written (or fetched) and the cluster deployed with site.yml.
bench-lab: setup
	@case "$(BENCH_MODEL)" in cache|real) ;; *) echo "BENCH_MODEL is cache or real, not $(BENCH_MODEL)" >&2; exit 2;; esac
	$(PLAYBOOK) -i localhost, lab/playbooks/lab_up.yml -e @lab/benchmarks/lab.yml
ifeq ($(BENCH_MODEL),real)
	$(PLAYBOOK) -i $(BENCH_INVENTORY) lab/playbooks/real_model.yml
	mkdir -p .cache/bench-draft && $(BIN)/python tools/draft_gguf.py $(REAL_MODEL) --blocks 15 --out .cache/bench-draft/gemma-first-15.gguf >/dev/null
else
	$(BIN)/python lab/tools/tiny_gguf.py --out .cache/bench-model --preset $(BENCH_MODEL) --shards 2 >/dev/null
endif
	$(PLAYBOOK) -i $(BENCH_INVENTORY) playbooks/site.yml $(BENCH_VARS:%=-e @%)

bench: bench-lab
	$(BIN)/python tools/seed_paper.py --json .cache/seed-paper.json
	$(PLAYBOOK) -i $(BENCH_INVENTORY) playbooks/benchmark.yml $(BENCH_VARS:%=-e @%) -e llama_benchmark_shared_bandwidth_nodes=1 \
		-e llama_benchmark_paper=$(CURDIR)/.cache/seed-paper.json \
		-e llama_benchmark_results_dir=$(CURDIR)/benchmarks/results/$$(date -u +%Y%m%dT%H%M%SZ)-$(BENCH_MODEL) \
		-e '{"llama_benchmark_site_rerun": true, "llama_benchmark_site_vars_files": [$(subst $(space),$(comma),$(BENCH_VARS:%="$(CURDIR)/%"))]}' $(BENCH_ARGS)

# The day-2 switches on the bench lab (lab/tools/switch_bench.py): a model switch and a llama.cpp switch, each staged
# and as a plain redeploy, and their rollbacks, with a client asking one token every 0.25 s; each staged switch and
# rollback three times (SWITCH_ARGS="--repeats N"), a hand restart after each; the other model files are the
# synthetic model's weights in 3 and in 4 shards (BENCH_MODEL=cache only). Report in benchmarks/results/<time>-switch/.
bench-switch: BENCH_MODEL = cache
bench-switch: bench-lab
	$(BIN)/python lab/tools/tiny_gguf.py --out .cache/switch-plain --preset cache --shards 3 >/dev/null
	$(BIN)/python lab/tools/tiny_gguf.py --out .cache/switch-staged --preset cache --shards 4 >/dev/null
	$(BIN)/python lab/tools/switch_bench.py --inventory $(BENCH_INVENTORY) $(BENCH_VARS:%=-e @%) \
		--plain-files '.cache/switch-plain/*-of-*.gguf' --staged-files '.cache/switch-staged/*-of-*.gguf' \
		--bridge $$($(BIN)/python -c "import yaml; print(yaml.safe_load(open('lab/benchmarks/lab.yml'))['lab_bridge'])") \
		--out benchmarks/results/$$(date -u +%Y%m%dT%H%M%SZ)-switch $(SWITCH_ARGS)

bench-down:
	$(PLAYBOOK) -i localhost, lab/playbooks/lab_down.yml -e @lab/benchmarks/lab.yml

# Each step timed (tools/steps.sh); the integration tests run in a lane beside the molecule scenarios, after the
# worker scenario has built llama.cpp (once, cached), which they use.
test:
	@STEPS_CPU_ACCOUNT=tests/output/cpu/pacct STEPS_FAILURES=tests/output/molecule/failures.txt tools/steps.sh setup \
		molecule-lanes

setup:
	@tools/setup.sh

lint: ruff yamllint ansible-lint sanity

ruff:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

yamllint:
	$(BIN)/yamllint --strict .

ansible-lint:
	$(BIN)/ansible-lint --profile production

sanity:
	tools/sanity.sh

unit:
	$(BIN)/pytest tests/unit

# Tests against real processes on this machine (root; loopback and the lab's own namespaces only).
integration:  # each test over 10 s in the log, as the scenarios' verify steps print theirs: the budget is visible
	LLAMARPC_REQUIRE_LLAMA=1 $(BIN)/pytest tests/integration --durations=0 --durations-min=10

# Unit and sanity tests on ansible-core 2.19 and 2.20 (Python 3.11 and 3.12, from PATH or pyenv), at once. In CI
# (CI set, as .ci/run runs) a missing Python fails the run: CI must prove what the README promises. On a box without
# one it is reported as SKIPPED, so that `make test` still works there; MATRIX_REQUIRE=1 or 0 decides either way.
MATRIX_REQUIRE ?= $(if $(CI),1,0)
matrix:
	@MATRIX_REQUIRE=$(MATRIX_REQUIRE) tools/ansible_matrix.sh

molecule:
	@for s in $(SCENARIOS); do \
	  echo "=== molecule scenario $$s"; \
	  $(BIN)/molecule test -s $$s || exit 1; \
	done

molecule-lanes:
	@MOLECULE=$(BIN)/molecule tools/molecule_lanes.sh --beside $(BESIDE_LANES) --first $(FIRST_LANES) --then $(LANES)

# The demo on a seed-shaped 6-host lab with the self-healing and fault-matrix tests alone (part of `make test` too).
test-cluster: setup
	$(BIN)/molecule test -s cluster

# Open WebUI in a real headless Chromium (heavy: about 3 GB installed on a lab host; not part of `make test`).
# Set-up adds Debian's chromium and a separate venv with Playwright (.cache/webui-tools); the screenshot is kept
# in tests/output/webui/.
test-webui: setup
	@tools/webui_test_setup.sh
	$(BIN)/molecule test -s webui

lab-up: setup
	$(PLAYBOOK) -i localhost, lab/playbooks/lab_up.yml

lab-down: setup
	$(PLAYBOOK) -i localhost, lab/playbooks/lab_down.yml

clean: lab-down
	rm -rf $(VENV) .cache tests/output
