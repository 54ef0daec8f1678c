"""``semsearch serve``: the HTTP search service over a bundle. The flags are handed as they are
to ``ServeOptions.from_cli``, which checks them together (serving/options.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .common import app, err, guard

if TYPE_CHECKING:
    from ..serving.options import ServeOptions

# the command's flags, in --help order

BundleArg = Annotated[Path, typer.Argument(help="Bundle directory from `semsearch index build`.")]
HostOpt = Annotated[
    str,
    typer.Option(help="Address to listen on (loopback by default; any other address needs --expose and an API key)."),
]
PortOpt = Annotated[int, typer.Option(help="Port.")]
StoreOpt = Annotated[str | None, typer.Option(help="Vector store: faiss or postgres (default: the bundle's).")]
WorkersOpt = Annotated[int, typer.Option(help="Worker processes, each with its own copy of the bundle in memory.")]
LoopOpt = Annotated[
    str,
    typer.Option(help="Event loop: asyncio or uvloop (the two serve alike; see docs/serving.md)."),
]
ResultCacheOpt = Annotated[
    int | None,
    typer.Option(
        "--result-cache",
        help="Recent distinct searches whose answers each worker keeps (default 2048; 0: none).",
    ),
]
ExposeOpt = Annotated[
    bool,
    typer.Option(
        "--expose",
        help="Allow a --host other than loopback (needs an API key: $SEMSEARCH_API_KEY or --api-key-file).",
    ),
]
ApiKeyFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--api-key-file",
        help="File holding the API key for the X-API-Key header (or $SEMSEARCH_API_KEY; never an argument).",
    ),
]
RateLimitOpt = Annotated[
    float | None,
    typer.Option(
        "--rate-limit",
        help="Requests a second per client and worker, bursts of twice that (default 20 with --expose; 0: none).",
    ),
]
RescoreOpt = Annotated[
    bool,
    typer.Option(
        "--rescore",
        help="Run the bundle's stage-3 cross-encoder on the first hits of every search (see docs/serving.md).",
    ),
]
RescoreDepthOpt = Annotated[
    int | None,
    typer.Option(
        "--rescore-depth",
        help="--rescore: how many hits it re-scores (default: the depth the bundle was built with).",
    ),
]
RescoreWeightOpt = Annotated[
    float | None,
    typer.Option(
        "--rescore-weight",
        help="--rescore: weight W in z(ranker) + W * z(cross-encoder) (default: the bundle's; inf: alone).",
    ),
]
CorrectQueriesOpt = Annotated[
    bool,
    typer.Option(help="Correct each query's spelling before searching (the answer's corrected_query says so)."),
]
EventsOpt = Annotated[
    str,
    typer.Option(
        "--events",
        metavar="DIR|off",
        help="Log every answer shown (impression) and every click sent to POST /events into DIR as "
        "Parquet segments (off: no event log; a folder named off: ./off).",
    ),
]
EventsFlushSecondsOpt = Annotated[
    float | None,
    typer.Option(
        "--events-flush-seconds",
        help="--events: each worker writes its buffered events at least this often; a crash loses "
        "at most the last interval's (default 5).",
    ),
]
CompareOpt = Annotated[
    Path | None,
    typer.Option(
        "--compare",
        metavar="BUNDLE_B",
        help="Compare this bundle (B, over the same documents) with BUNDLE (A) on the users: every worker "
        "loads both; needs --events (read the comparison back with `semsearch clicks compare DIR`).",
    ),
]
CompareModeOpt = Annotated[
    str | None,
    typer.Option(
        "--compare-mode",
        help="--compare: interleave (every search shows a team-draft interleaving of A and B) or ab (each "
        "user, by X-Client-Id, is served by A or B: buckets control-1/2 and experiment-1/2) (default interleave).",
    ),
]
CompareSaltOpt = Annotated[
    str | None,
    typer.Option(
        "--compare-salt",
        help="--compare-mode ab: the salt users are hashed to buckets with (a new salt reshuffles them; "
        "give `clicks compare` the same).",
    ),
]
AllowWritesOpt = Annotated[
    bool,
    typer.Option(
        "--allow-writes",
        help="Take document changes: POST /documents (upsert) and DELETE /documents/{id}, logged durably "
        "in --changes and seen by every worker's next searches (see docs/serving.md).",
    ),
]
ChangesOpt = Annotated[
    Path | None,
    typer.Option(
        "--changes",
        metavar="DIR",
        help="--allow-writes: the change log's folder (default: BUNDLE.changes beside the bundle).",
    ),
]
MergeAtOpt = Annotated[
    int | None,
    typer.Option(
        "--merge-at",
        help="--allow-writes: merge the changes into the bundle in the background once this many documents "
        "are upserted or deleted (default 5000; 0: never).",
    ),
]
ClusterOpt = Annotated[
    str | None,
    typer.Option(
        "--cluster",
        metavar="ADDRESS",
        help="Serve a sharded bundle on a Ray cluster with Ray Serve: local (a new one here), auto (the "
        "one 'ray start' runs here), ray://HOST:10001 or HOST:PORT (see docs/scaling.md).",
    ),
]
ShardReplicasOpt = Annotated[
    int | None, typer.Option("--shard-replicas", help="--cluster: replicas of each shard (default 1).")
]
ReplicaCpusOpt = Annotated[
    float | None,
    typer.Option(
        "--replica-cpus",
        help="--cluster: CPUs each shard replica reserves (default 0: all may share a machine; 1 or more "
        "spreads them over the cluster's machines).",
    ),
]
WriteKeyFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--write-key-file",
        help="--allow-writes: file holding the key writes need in the X-Write-Key header (or "
        "$SEMSEARCH_WRITE_KEY; required with --expose; not the API key).",
    ),
]


@app.command("serve")
@guard
def serve_cmd(
    bundle: BundleArg,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8000,
    store: StoreOpt = None,
    workers: WorkersOpt = 1,
    loop: LoopOpt = "asyncio",
    result_cache: ResultCacheOpt = None,
    expose: ExposeOpt = False,
    api_key_file: ApiKeyFileOpt = None,
    rate_limit: RateLimitOpt = None,
    rescore: RescoreOpt = False,
    rescore_depth: RescoreDepthOpt = None,
    rescore_weight: RescoreWeightOpt = None,
    correct_queries: CorrectQueriesOpt = True,
    events: EventsOpt = "off",
    events_flush_seconds: EventsFlushSecondsOpt = None,
    compare: CompareOpt = None,
    compare_mode: CompareModeOpt = None,
    compare_salt: CompareSaltOpt = None,
    allow_writes: AllowWritesOpt = False,
    changes: ChangesOpt = None,
    merge_at: MergeAtOpt = None,
    cluster: ClusterOpt = None,
    shard_replicas: ShardReplicasOpt = None,
    replica_cpus: ReplicaCpusOpt = None,
    write_key_file: WriteKeyFileOpt = None,
) -> None:
    """Serve a bundle over HTTP: /search, /explain, /events, /health, /ready, /metrics, /docs and a search page at /."""
    from ..serving.options import ServeOptions
    from ..serving.server import serve

    options = ServeOptions.from_cli(
        bundle,
        host=host,
        port=port,
        store=store,
        workers=workers,
        loop=loop,
        result_cache=result_cache,
        expose=expose,
        api_key_file=api_key_file,
        rate_limit=rate_limit,
        rescore=rescore,
        rescore_depth=rescore_depth,
        rescore_weight=rescore_weight,
        correct_queries=correct_queries,
        events=events,
        events_flush_seconds=events_flush_seconds,
        compare=compare,
        compare_mode=compare_mode,
        compare_salt=compare_salt,
        allow_writes=allow_writes,
        changes=changes,
        merge_at=merge_at,
        cluster=cluster,
        shard_replicas=shard_replicas,
        replica_cpus=replica_cpus,
        write_key_file=write_key_file,
    )
    announce = _announcement(bundle, options, key_from_file=api_key_file is not None, compare=compare)
    serve(options, announce=lambda: err.print(announce, highlight=False))


def _announcement(bundle: Path, options: ServeOptions, *, key_from_file: bool, compare: Path | None) -> str:
    """The line printed once the service answers: its address, workers and the guards it keeps
    (the bundles named as they were given)."""
    from ..serving.exposure import API_KEY_ENV

    o = options
    rate = o.exposure.rate
    guards = ", ".join(
        [f"API key required ({'file' if key_from_file else '$' + API_KEY_ENV})"] * (o.api_key is not None)
        + [f"at most {rate:g} requests/s per client and worker"] * (rate > 0)
        + [f"events logged to {o.events}"] * (o.events is not None)
        + [f"compared with {compare} ({o.compare_mode})"] * (compare is not None)
        + [f"writes on{' (write key required)' if o.write_key else ''}"] * o.allow_writes
        + [f"Ray Serve on {o.cluster}, {o.shard_replicas} replica(s) a shard"] * (o.cluster is not None)
    )
    return (
        f"serving {bundle} on http://{o.host}:{o.port}/ ({o.workers} worker{'s' * (o.workers > 1)}"
        f"{'; ' + guards if guards else ''})"
    )
