"""Search a bundle from Python: load it once, then search queries with it.

A bundle is what `semsearch index build` (or `make bundle`) writes: the documents, a lexical index,
a vector index per neural model and an optional ranker. Run from the repository root:

    .venv/bin/python examples/search_bundle.py "cordless drill" "outdoor led light"
    .venv/bin/python examples/search_bundle.py --bundle bundles/homedepot -k 5 --json "red paint"
    # no bundle yet: build a BM25-only one of a data set first (seconds for homedepot)
    .venv/bin/python examples/search_bundle.py --build-from homedepot --bundle /tmp/bm25-bundle "wood screws"

Data sets are named under $SEMSEARCH_DATA (default ../shared/data), or given as a folder.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from semsearch.data import open_dataset
from semsearch.index.bundle import Bundle, build_bundle
from semsearch.plugins import create_model

REPO = Path(__file__).resolve().parents[1]
DEFAULT_QUERIES = ["cordless drill", "outdoor led light"]


def build(data: str, out: Path, fields: str) -> None:
    """A lexical-only bundle of a data set: BM25 (English analyzer) over its documents."""
    ds = open_dataset(data)
    build_bundle(ds.corpus(), [create_model("bm25", analyzer="english")], out, dataset=ds.name, fields=fields)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("queries", nargs="*", default=DEFAULT_QUERIES, help="query texts (default: %(default)s)")
    p.add_argument("--bundle", type=Path, default=REPO / "bundles" / "homedepot", help="bundle directory")
    p.add_argument("-k", type=int, default=10, help="hits per query")
    p.add_argument("--model", help="which neural model of the bundle (default: its first)")
    p.add_argument("--merge", default="union", choices=["union", "rrf", "interpolate"], help="lexical + semantic")
    p.add_argument("--build-from", metavar="DATA", help="first build a BM25 bundle of this data set at --bundle")
    p.add_argument("--fields", default="title", help="document fields --build-from indexes")
    p.add_argument("--json", action="store_true", help="one JSON line per hit instead of a table")
    args = p.parse_args()

    if args.build_from:
        build(args.build_from, args.bundle, args.fields)
    elif not args.bundle.is_dir():
        p.error(f"no bundle at {args.bundle}: run `make bundle`, or give --build-from DATA")

    bundle = Bundle.load(args.bundle)  # verifies every file's checksum against the manifest
    try:
        for query in args.queries:
            result = bundle.search(query, args.k, model=args.model, merge_by=args.merge)
            rows = bundle.hits(result)  # rank, doc id, score, title, text of each hit
            if args.json:
                for hit, merged in zip(rows, result.hits):
                    line = {"query": query, "searched": result.query, **asdict(hit), "source": merged.sources.name}
                    print(json.dumps(line, ensure_ascii=False))
                continue
            print(f"\n{query!r}" + (f" (searched as {result.query!r})" if result.query != query else ""))
            print(f"{len(rows)} hits in {result.timing.get('total_ms', float('nan')):.1f} ms")
            for hit, merged in zip(rows, result.hits):
                print(f"{hit.rank:>3}  {hit.score:9.4f}  {merged.sources.name:<8}  {hit.doc_id:<12}  {hit.title[:70]}")
    finally:
        bundle.close()  # stops the bundle's search threads


if __name__ == "__main__":
    main()
