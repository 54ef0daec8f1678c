# Two entry points (see README): `make serve` (the main job) and `make test`; `make reproduce` runs every paper table.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install serve bundle reproduce click-loop portable test test-tools fuzz bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test,bench]'
	@touch $(STAMP)

install: $(STAMP)

BUNDLE ?= bundles/homedepot
WORKERS ?= 2  # server processes: one per core of this 2-core machine

## The main job: build the two-stage search of the Home Depot titles (README, "The served search")
## and serve it on http://127.0.0.1:8000. Stage 1: BM25 (english analyzer) top N ∪ the top M of an
## 8-bit HNSW index (hnswsq) of MiniLM's (all-MiniLM-L6-v2) vectors of the 54,667 titles, searched
## with a static query encoder distilled from MiniLM on the train queries and titles (no transformer
## per query); stage 2: LambdaMART trained on stage 1's candidates for the train queries, N, M and
## trees chosen on dev, then the HNSW efSearch it serves with (the smallest level on dev). Built once (about 6 min on 2 cores, progress in the log; MiniLM encodes the
## collection once, shared through bundles/.vectors); `make bundle` rebuilds it.
QUERY_MODEL ?= models/static-query
BUILD = $(BIN)/semsearch train static-query --data homedepot --fields title --param spans=1 \
	--param cache=bundles/.vectors --out $(QUERY_MODEL) \
	&& $(BIN)/semsearch index build --data homedepot --models bm25,$(QUERY_MODEL) --analyzer english --fields title \
	--vector-index hnswsq --train-ranker --ranker-param rel_threshold=3 \
	--ranker-param 'stage_depths=[[50,50],[100,50],[100,100]]' --ranker-param 'search_efforts=[64,96,128]' \
	--vector-cache bundles/.vectors --out $(BUNDLE)

$(BUNDLE)/manifest.json: | $(STAMP)  # built once (order-only: a reinstall does not rebuild it); `make bundle` rebuilds
	$(BUILD)

bundle: $(STAMP)  # rebuild (the old bundle is served until the new one is swapped in)
	$(BUILD)

## The searches it answers and the results opened in the page are logged under $(EVENTS) (Parquet;
## docs/serving.md, "The event log"); EVENTS=off logs nothing.
EVENTS ?= bundles/events
serve: $(BUNDLE)/manifest.json
	$(BIN)/semsearch serve $(BUNDLE) --workers $(WORKERS) --events $(EVENTS)

## Reproduce every registered paper table we can (markdown + JSON under results/).
reproduce: $(STAMP)
	$(BIN)/semsearch reproduce --all --out results

## The click loop (docs/clicks.md): 10M simulated impressions per logger (BM25, then the served bundle),
## click models fitted, bundles learnt from the clicks alone, every bundle scored through HTTP on the
## test queries, two bundles compared online; prints goals 4 and 5 as tables (results/click-loop).
click-loop: $(BUNDLE)/manifest.json
	$(BIN)/semsearch clicks loop --bundle $(BUNDLE) --out results/click-loop

## The two-stage search without judgments (docs/serving.md, "A collection without judgments"): the
## portable ranker trained on Home Depot, then SciFact, TREC DL 2019, Cranfield and CISI served
## through HTTP beside BM25 (results/portable; MiniLM encodes each collection once, results/portable/vectors).
## PORTABLE_INSTALL=--install copies the trained ranker into the package (index build --ranker portable).
PORTABLE_INSTALL ?=
portable: $(STAMP)
	$(BIN)/python -c "from semsearch.plugins import create_model; create_model('bert-rep').save('results/portable/minilm')"
	$(BIN)/python -m semsearch.experiments.portable encoder=results/portable/minilm out=results/portable $(PORTABLE_INSTALL)

## The Debian packages the tests drive: chromium (the search page in a browser) and wrk (load-test
## smoke), installed when missing (the one place: CI's .ci/run runs `make test`).
test-tools:
	@command -v chromium >/dev/null && command -v wrk >/dev/null || (apt-get update && apt-get install -y chromium wrk)

## Every test: unit tests on generated fixtures and integration tests on ../shared/data, in
## TEST_WORKERS pytest processes (pytest-xdist, tests handed out as workers free up): most tests
## wait on child processes, imports, sockets or one torch thread, so two share this 2-core machine
## well (about 10 min instead of 16). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
test: $(STAMP) test-tools
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal

## Property-based fuzzing of every reader under the nightly profile (2,000 examples each; `make test`
## runs the same tests at 200, derandomized).
fuzz: $(STAMP)
	SEMSEARCH_FUZZ_PROFILE=nightly $(BIN)/python -m pytest -q -p no:cacheprovider tests/data/test_fuzz_readers.py

bench: $(STAMP)  # every benchmark against its peer in one run (< 18 min); writes docs/benchmarks.md
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) results build *.egg-info src/*.egg-info
