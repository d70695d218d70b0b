# Quick start: `make run` (venv, install, device-fit on the built-in K3-class example) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXAMPLE := examples/out/kimi-k3
EXAMPLE_MODEL := $(EXAMPLE)/kimi-k3-00001-of-00014.gguf

.PHONY: run test test-winsim bench example clean

SOURCES := $(shell find moetools -name '*.py')

# A regular (not editable) install, as users get from pip: an editable install's import hook costs
# 15 ms at every start-up, a tenth of `inspect`'s whole run. Reinstalled whenever a source changes.
$(STAMP): pyproject.toml $(SOURCES)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check '.[test]'
	touch $(STAMP)

$(EXAMPLE_MODEL): | $(STAMP)
	$(BIN)/python -m moetools.synth kimi-k3 $(EXAMPLE)/kimi-k3.gguf --shards 14 > /dev/null

example: $(EXAMPLE_MODEL)

run: $(STAMP) $(EXAMPLE_MODEL)
	$(BIN)/moetools device-fit $(EXAMPLE_MODEL) --vram 32G --coverage examples/k3-coverage.json

test: $(STAMP)
	$(BIN)/python -m pytest

# The whole suite again under a simulated Windows Python (what .ci/run does second).
test-winsim: $(STAMP)
	PYTHONPATH=tests/winsim $(BIN)/python -m pytest -q -p no:cacheprovider

bench: $(STAMP)
	for script in benchmarks/bench_*.py; do echo "== $$script"; $(BIN)/python $$script || exit 1; done

clean:
	rm -rf $(VENV) examples/out .pytest_cache
