"""A sharded bundle served by Ray Serve (issue 51): one deployment per shard, replicated, and a
coordinator deployment behind the service's own HTTP API and page.

The coordinator (``Coordinator``) is the ingress: it builds the same FastAPI app as ``semsearch
serve`` (``create_app``) over a ``ShardedBundle`` whose shards are Ray Serve deployment handles
(``RayShard``), so every endpoint, check and answer is the single-process service's. Each shard
deployment (``ShardReplica``) loads its shard folder (``index.bundle.shard.Shard``) and answers
the search's rounds. Ray Serve routes each call to one replica of the shard and replaces a replica
that dies; a call that fails because its replica died is retried on another (the rounds only
read), so a killed replica costs no failed search while another replica of its shard lives. When
every replica of a shard is gone, searches fail with 503 naming the shard (``ShardUnavailable``):
an answer without a shard's documents would look complete.

A new version of the bundle rolls out by deploying the application again (``deploy``; ``serve
--cluster`` does it when a new version is written at the path it serves, e.g. by ``semsearch index
shard`` after the plain bundle took changes): Ray Serve replaces each deployment's replicas a few
at a time, starting new ones before stopping old ones, which finish their calls first. The new version must split the
collection as the old did (same shard count and ranges): for a short while a search may read some
shards at the old version and some at the new. Ray's own metrics (and its dashboard) describe the
replicas; the coordinator's ``/metrics`` counts its calls to every shard
(``semsearch_shard_calls``, ``semsearch_shard_call_seconds``)."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ray import serve

from ..index.bundle.coordinator import ShardedBundle
from ..index.bundle.shard import SHARD, SHARDED, Shard, read_sharded
from ..models.base import ModelDirError, sha256_file
from ..ray_cluster import connect
from .options import ServeOptions

APP = "semsearch"
RETRIES = 3
"""Calls of a round to a shard before it counts as unavailable (another replica takes each retry)."""
RETRY_WAIT_S = 0.2
FOLLOW_S = 2.0
"""How often ``serve --cluster`` looks for a new version of the bundle at its path."""


@serve.deployment(max_ongoing_requests=16, health_check_period_s=2, graceful_shutdown_timeout_s=10)
class ShardReplica:
    """One replica of one shard: the shard's folder loaded, its rounds answered."""

    def __init__(self, path: str, verify: bool, digest: str) -> None:
        """The shard folder at ``path``, which must be the one the coordinator's manifest lists
        (``digest``: the sha256 of its ``shard.json``; a new version of the bundle has new ones,
        so deploying it replaces the replicas)."""
        found = sha256_file(Path(path) / SHARD)
        if found != digest:
            raise ModelDirError(f"{path}: not the shard its sharded bundle lists ({SHARD} changed since)")
        self.shard = Shard(path, verify=verify)

    def call(self, method: str, *args: Any) -> Any:
        return self.shard.call(method, *args)


class _Call:
    """A round's call to one shard: ``result`` waits for it, calling again (another replica)
    when the replica that took it died or could not be reached."""

    def __init__(self, handle: Any, method: str, args: tuple[Any, ...]):
        self.handle, self.method, self.args = handle, method, args
        self.response = handle.call.remote(method, *args)

    def result(self) -> Any:
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

        for attempt in range(RETRIES):
            try:
                return self.response.result()
            except (ActorDiedError, ActorUnavailableError, RayActorError):
                if attempt == RETRIES - 1:
                    raise
                time.sleep(RETRY_WAIT_S * (attempt + 1))
                self.response = self.handle.call.remote(self.method, *self.args)
        raise AssertionError("unreachable")


class RayShard:
    """A ``ShardClient`` over a shard deployment's handle."""

    def __init__(self, handle: Any):
        self.handle = handle

    def submit(self, method: str, *args: Any) -> _Call:
        return _Call(self.handle, method, args)


@serve.deployment(health_check_period_s=2, graceful_shutdown_timeout_s=10)
@serve.ingress()
class Coordinator:
    """The ingress: the service's app over the shards' handles (module docstring)."""

    def __init__(self, options: ServeOptions, shards: Sequence[Any], version: str) -> None:
        """``version``: the bundle's (``version``), checked against the folder it opens."""
        self.settings = options
        self.bundle = ShardedBundle(options.bundle, [RayShard(h) for h in shards], options.load)
        if bundle_version(options.bundle) != version:
            raise ModelDirError(f"{options.bundle}: changed while it was being deployed")

    def __serve_build_asgi_app__(self) -> Any:
        from .app import create_app

        o = self.settings
        return create_app(
            self.bundle,
            load=o.load,
            exposure=o.exposure,
            events=o.events,
            events_flush_seconds=o.events_flush_seconds,
            event_secret=o.event_secret,
        )


def application(options: ServeOptions) -> Any:
    """The Ray Serve application of ``options.bundle`` (a sharded bundle): its shard deployments,
    ``options.shard_replicas`` replicas each (reserving ``replica_cpus`` CPUs each: 0 lets every
    replica share one machine; 1 or more makes Ray spread them over a cluster's machines), and the
    coordinator."""
    path = Path(options.bundle)
    coord = read_sharded(path, verify=options.load.verify)
    shards = [
        ShardReplica.options(  # type: ignore[attr-defined]  # a Ray Serve deployment
            name=f"shard-{i}",
            num_replicas=options.shard_replicas,
            ray_actor_options={"num_cpus": options.replica_cpus},
        ).bind(str((path / s["path"]).resolve()), options.load.verify, coord["files"][f"{s['path']}/{SHARD}"])
        for i, s in enumerate(coord["shards"])
    ]
    return Coordinator.options(ray_actor_options={"num_cpus": 0}).bind(options, shards, bundle_version(path))  # type: ignore[attr-defined]  # a Ray Serve deployment


def _say(message: str) -> None:
    print(f"semsearch: {message}", file=sys.stderr, flush=True)


def bundle_version(path: str | Path) -> str:
    """A sharded bundle's version: the sha256 of its coordinator manifest (which lists every
    coordinator file's and every shard manifest's sha256)."""
    return sha256_file(Path(path) / SHARDED)


def deploy(options: ServeOptions) -> Any:
    """Deploy (or roll out anew) the sharded bundle ``options.bundle`` on the Ray cluster at
    ``options.cluster``, its HTTP proxy on ``options.host:options.port``; returns the coordinator's
    handle once every replica is up. Deploying again with another folder of the same split rolls
    the new version out (module docstring)."""
    connect(str(options.cluster))
    serve.start(http_options={"host": options.host, "port": options.port})
    return serve.run(application(options), name=APP, route_prefix="/", blocking=False)


def serve_until_interrupted(options: ServeOptions, announce: Any = None) -> None:
    """``semsearch serve --cluster``: ``deploy``, announce, serve until interrupted, then delete the
    application (and stop Ray when this process started it)."""
    import signal

    import ray

    def stop(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)  # (a supervisor's stop: the application is deleted too)
    started = connect(str(options.cluster))
    try:
        served = bundle_version(options.bundle)
        deploy(options)
        if announce is not None:
            announce()
        while True:  # a new version written at the served path (index shard --out) is rolled out
            time.sleep(FOLLOW_S)
            try:
                now = bundle_version(options.bundle)
            except OSError:
                continue  # (between the two renames of a folder swap)
            if now != served:
                _say(f"{options.bundle}: a new version ({now[:12]}); rolling it out shard by shard")
                try:
                    deploy(options)
                    served = now
                    _say(f"{options.bundle}: version {now[:12]} served")
                except Exception as e:  # noqa: BLE001  # the old version keeps serving; retried on the next change
                    _say(f"{options.bundle}: rolling out version {now[:12]} failed ({e}); the old one keeps serving")
                    served = now
    except KeyboardInterrupt:
        pass
    finally:
        try:
            serve.delete(APP)
        finally:
            if started:
                ray.shutdown()


__all__ = [
    "APP",
    "Coordinator",
    "RayShard",
    "ShardReplica",
    "application",
    "connect",
    "deploy",
    "serve_until_interrupted",
]
