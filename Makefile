# Two entry points (see README): `make serve` (the main job) and `make test`; `make reproduce` runs every paper table.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install serve bundle reproduce test test-tools bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test,bench]'
	@touch $(STAMP)

install: $(STAMP)

BUNDLE ?= bundles/homedepot
WORKERS ?= 2  # server processes: one per core of this 2-core machine (load test: p99 41 ms at 2, 74 ms at 1)
DSSM   := models/homedepot-dssm

$(DSSM)/config.json: $(STAMP)
	$(BIN)/semsearch train dssm --data homedepot --out $(DSSM) --param negatives=50

## The main job: train DSSM on Home Depot (best of our neural models there), build a BM25 + DSSM
## search bundle of the 54,667 titles and serve it on http://127.0.0.1:8000
bundle: $(DSSM)/config.json
	$(BIN)/semsearch index build --data homedepot --models bm25,$(DSSM) --fields title --vector-index hnsw --out $(BUNDLE)

serve: bundle
	$(BIN)/semsearch serve $(BUNDLE) --workers $(WORKERS)

## Reproduce every registered paper table we can (markdown + JSON under results/).
reproduce: $(STAMP)
	$(BIN)/semsearch reproduce --all --out results

## The Debian packages the tests drive: chromium (the search page in a browser) and wrk (load-test
## smoke), installed when missing (the one place: CI's .ci/run runs `make test`).
test-tools:
	@command -v chromium >/dev/null && command -v wrk >/dev/null || (apt-get update && apt-get install -y chromium wrk)

## Every test: unit tests on generated fixtures and integration tests on ../shared/data.
test: $(STAMP) test-tools
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/bm25_speed.py

clean:
	rm -rf $(VENV) results build *.egg-info src/*.egg-info
