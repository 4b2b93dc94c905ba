# Two commands set up and use a fresh machine: `make demo` (the main job) and `make test` (the tests).
PY ?= python3.12
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell sha256sum pyproject.toml | cut -c1-12)

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip wheel
	$(BIN)/pip install -q -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $(STAMP)

.PHONY: install demo test
install: $(STAMP)

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/vxsynth demo

test: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/pytest -q --durations=25
