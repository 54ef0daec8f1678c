"""``semsearch serve``: the HTTP search service over a bundle."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .common import (
    _guard,
    _needs,
    app,
    err,
)


@app.command("serve")
@_guard
def serve_cmd(
    bundle: Annotated[Path, typer.Argument(help="Bundle directory from `semsearch index build`.")],
    host: Annotated[
        str,
        typer.Option(
            help="Address to listen on (loopback by default; any other address needs --expose and an API key)."
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8000,
    store: Annotated[str | None, typer.Option(help="Vector store: faiss or postgres (default: the bundle's).")] = None,
    workers: Annotated[int, typer.Option(help="Worker processes, each with its own copy of the bundle in memory.")] = 1,
    loop: Annotated[
        str,
        typer.Option(help="Event loop: asyncio or uvloop (the two serve alike; see docs/serving.md)."),
    ] = "asyncio",
    result_cache: Annotated[
        int | None,
        typer.Option(
            "--result-cache",
            help="Recent distinct searches whose answers each worker keeps (default 2048; 0: none).",
        ),
    ] = None,
    expose: Annotated[
        bool,
        typer.Option(
            "--expose",
            help="Allow a --host other than loopback (needs an API key: $SEMSEARCH_API_KEY or --api-key-file).",
        ),
    ] = False,
    api_key_file: Annotated[
        Path | None,
        typer.Option(
            "--api-key-file",
            help="File holding the API key for the X-API-Key header (or $SEMSEARCH_API_KEY; never an argument).",
        ),
    ] = None,
    rate_limit: Annotated[
        float | None,
        typer.Option(
            "--rate-limit",
            help="Requests a second per client and worker, bursts of twice that (default 20 with --expose; 0: none).",
        ),
    ] = None,
    rescore: Annotated[
        bool,
        typer.Option(
            "--rescore",
            help="Run the bundle's stage-3 cross-encoder on the first hits of every search (see docs/serving.md).",
        ),
    ] = False,
    rescore_depth: Annotated[
        int | None,
        typer.Option(
            "--rescore-depth",
            help="--rescore: how many hits it re-scores (default: the depth the bundle was built with).",
        ),
    ] = None,
    rescore_weight: Annotated[
        float | None,
        typer.Option(
            "--rescore-weight",
            help="--rescore: weight W in z(ranker) + W * z(cross-encoder) (default: the bundle's; inf: alone).",
        ),
    ] = None,
    correct_queries: Annotated[
        bool,
        typer.Option(help="Correct each query's spelling before searching (the answer's corrected_query says so)."),
    ] = True,
    events: Annotated[
        str,
        typer.Option(
            "--events",
            metavar="DIR|off",
            help="Log every answer shown (impression) and every click sent to POST /events into DIR as "
            "Parquet segments (off: no event log; a folder named off: ./off).",
        ),
    ] = "off",
    events_flush_seconds: Annotated[
        float | None,
        typer.Option(
            "--events-flush-seconds",
            help="--events: each worker writes its buffered events at least this often; a crash loses "
            "at most the last interval's (default 5).",
        ),
    ] = None,
    compare: Annotated[
        Path | None,
        typer.Option(
            "--compare",
            metavar="BUNDLE_B",
            help="Compare this bundle (B, over the same documents) with BUNDLE (A) on the users: every worker "
            "loads both; needs --events (read the comparison back with `semsearch clicks compare DIR`).",
        ),
    ] = None,
    compare_mode: Annotated[
        str | None,
        typer.Option(
            "--compare-mode",
            help="--compare: interleave (every search shows a team-draft interleaving of A and B) or ab (each "
            "user, by X-Client-Id, is served by A or B: buckets control-1/2 and experiment-1/2) (default interleave).",
        ),
    ] = None,
    compare_salt: Annotated[
        str | None,
        typer.Option(
            "--compare-salt",
            help="--compare-mode ab: the salt users are hashed to buckets with (a new salt reshuffles them; "
            "give `clicks compare` the same).",
        ),
    ] = None,
    allow_writes: Annotated[
        bool,
        typer.Option(
            "--allow-writes",
            help="Take document changes: POST /documents (upsert) and DELETE /documents/{id}, logged durably "
            "in --changes and seen by every worker's next searches (see docs/serving.md).",
        ),
    ] = False,
    changes: Annotated[
        Path | None,
        typer.Option(
            "--changes",
            metavar="DIR",
            help="--allow-writes: the change log's folder (default: BUNDLE.changes beside the bundle).",
        ),
    ] = None,
    merge_at: Annotated[
        int | None,
        typer.Option(
            "--merge-at",
            help="--allow-writes: merge the changes into the bundle in the background once this many documents "
            "are upserted or deleted (default 5000; 0: never).",
        ),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            metavar="ADDRESS",
            help="Serve a sharded bundle on a Ray cluster with Ray Serve: local (a new one here), auto (the "
            "one 'ray start' runs here), ray://HOST:10001 or HOST:PORT (see docs/scaling.md).",
        ),
    ] = None,
    shard_replicas: Annotated[
        int | None, typer.Option("--shard-replicas", help="--cluster: replicas of each shard (default 1).")
    ] = None,
    replica_cpus: Annotated[
        float | None,
        typer.Option(
            "--replica-cpus",
            help="--cluster: CPUs each shard replica reserves (default 0: all may share a machine; 1 or more "
            "spreads them over the cluster's machines).",
        ),
    ] = None,
    write_key_file: Annotated[
        Path | None,
        typer.Option(
            "--write-key-file",
            help="--allow-writes: file holding the key writes need in the X-Write-Key header (or "
            "$SEMSEARCH_WRITE_KEY; required with --expose; not the API key).",
        ),
    ] = None,
) -> None:
    """Serve a bundle over HTTP: /search, /explain, /events, /health, /ready, /metrics, /docs and a search page at /."""
    import os

    from ..serving.exposure import API_KEY_ENV, WRITE_KEY_ENV, check_key, read_key_file
    from ..serving.options import ServeOptions
    from ..serving.server import serve

    _needs(
        "--rescore",
        rescore,
        {"--rescore-depth": rescore_depth is not None, "--rescore-weight": rescore_weight is not None},
    )
    _needs("--events", events != "off", {"--events-flush-seconds": events_flush_seconds is not None})
    _needs(
        "--compare",
        compare is not None,
        {"--compare-mode": compare_mode is not None, "--compare-salt": compare_salt is not None},
    )
    _needs(
        "--allow-writes",
        allow_writes,
        {
            "--changes": changes is not None,
            "--write-key-file": write_key_file is not None,
            "--merge-at": merge_at is not None,
        },
    )
    _needs(
        "--cluster",
        cluster is not None,
        {"--shard-replicas": shard_replicas is not None, "--replica-cpus": replica_cpus is not None},
    )
    write_key = read_key_file(str(write_key_file), "--write-key-file") if write_key_file is not None else None
    if write_key is None and allow_writes and os.environ.get(WRITE_KEY_ENV):
        write_key = check_key(os.environ[WRITE_KEY_ENV], f"${WRITE_KEY_ENV}")
    key = read_key_file(str(api_key_file)) if api_key_file is not None else None
    if key is None and os.environ.get(API_KEY_ENV):
        key = check_key(os.environ[API_KEY_ENV], f"${API_KEY_ENV}")
    load = {
        "store": store,
        "rescore": rescore,
        "rescore_depth": rescore_depth,
        "rescore_weight": rescore_weight,
        "correct_queries": correct_queries,
        **({} if result_cache is None else {"result_cache": result_cache}),
    }
    options = ServeOptions.from_mapping(
        {
            "bundle": str(bundle.resolve()),
            "load": load,
            "host": host,
            "port": port,
            "workers": workers,
            "loop": loop,
            "expose": expose,
            "api_key": key,
            "rate_limit": rate_limit,
            "events": None if events == "off" else str(Path(events).resolve()),
            **({} if events_flush_seconds is None else {"events_flush_seconds": events_flush_seconds}),
            **({} if compare is None else {"compare": str(compare.resolve())}),
            **({} if compare_mode is None else {"compare_mode": compare_mode}),
            **({} if compare_salt is None else {"compare_salt": compare_salt}),
            "allow_writes": allow_writes,
            **({} if changes is None else {"changes": str(changes.resolve())}),
            "write_key": write_key,
            **({} if merge_at is None else {"merge_at": merge_at}),
            **({} if cluster is None else {"cluster": cluster}),
            **({} if shard_replicas is None else {"shard_replicas": shard_replicas}),
            **({} if replica_cpus is None else {"replica_cpus": replica_cpus}),
        }
    )
    rate = options.exposure.rate
    guards = ", ".join(
        [f"API key required ({'file' if api_key_file else '$' + API_KEY_ENV})"] * (key is not None)
        + [f"at most {rate:g} requests/s per client and worker"] * (rate > 0)
        + [f"events logged to {options.events}"] * (options.events is not None)
        + [f"compared with {compare} ({options.compare_mode})"] * (compare is not None)
        + [f"writes on{' (write key required)' if write_key else ''}"] * allow_writes
        + [f"Ray Serve on {cluster}, {options.shard_replicas} replica(s) a shard"] * (cluster is not None)
    )
    announce = (
        f"serving {bundle} on http://{host}:{port}/ ({workers} worker{'s' * (workers > 1)}"
        f"{'; ' + guards if guards else ''})"
    )
    serve(options, announce=lambda: err.print(announce, highlight=False))
