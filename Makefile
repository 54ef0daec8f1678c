# Two entry points (see README): `make reproduce` and `make test`.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install reproduce test bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test,bench]'
	@touch $(STAMP)

install: $(STAMP)

## The main job: reproduce every registered paper table we can (markdown + JSON under results/).
reproduce: $(STAMP)
	$(BIN)/semsearch reproduce --all --out results

## Every test: unit tests on generated fixtures and integration tests on ../shared/data.
test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/bm25_speed.py

clean:
	rm -rf $(VENV) results build *.egg-info src/*.egg-info
