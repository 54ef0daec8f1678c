"""Typed options of the search service (``semsearch serve``): what bundle, how it is loaded, the
guards it keeps, where it listens and how many worker processes serve it. Validated once when
made (the command line builds one from its flags with ``ServeOptions.from_cli``); the service and
each of its worker processes receive this object as it is, never settings re-read from the
environment."""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any, ClassVar, Literal

from ..clicks.abtest import DEFAULT_SALT
from ..index.bundle.options import LoadOptions
from ..index.live import MERGE_AT
from ..params import ParamError, Params, needs, param
from .exposure import API_KEY_ENV, WRITE_KEY_ENV, Exposure, ExposureError, check_key, is_loopback, read_key_file

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8000
MIN_SECRET_CHARS = 16
EXPOSED_RATE = 20.0
"""Requests a second per client and worker when the service is exposed and no rate is given."""


def _keys(api_key_file: Path | None, write_key_file: Path | None, allow_writes: bool) -> tuple[str | None, str | None]:
    """``serve``'s API key and write key: each read from its file, or else from $SEMSEARCH_API_KEY /
    $SEMSEARCH_WRITE_KEY (the write key only with --allow-writes); None: no key."""
    write_key = read_key_file(str(write_key_file), "--write-key-file") if write_key_file is not None else None
    if write_key is None and allow_writes and os.environ.get(WRITE_KEY_ENV):
        write_key = check_key(os.environ[WRITE_KEY_ENV], f"${WRITE_KEY_ENV}")
    api_key = read_key_file(str(api_key_file)) if api_key_file is not None else None
    if api_key is None and os.environ.get(API_KEY_ENV):
        api_key = check_key(os.environ[API_KEY_ENV], f"${API_KEY_ENV}")
    return api_key, write_key


@dataclasses.dataclass(frozen=True)
class ServeOptions(Params):
    """How ``semsearch serve`` runs; messages name each field by its command-line flag.

    ``bundle``: the bundle directory; ``load``: how each worker opens it (``LoadOptions``);
    ``host`` / ``port``: where to listen (any host but loopback needs ``expose`` and an API
    key); ``workers``: processes, each with its own copy of the bundle; ``loop``: the event loop;
    ``api_key``: the key ``/search``, ``/explain``, ``/events`` and ``/metrics`` require (a
    secret: kept out of the repr); ``rate_limit``: requests a second per client and worker (None:
    ``EXPOSED_RATE`` when exposed, else none); ``events``: the event-log directory (None: no
    events are logged); ``events_flush_seconds``: how often each worker writes its buffered
    events (what a crash can lose); ``event_secret``: the key search ids are signed with, shared
    by the workers (a secret: kept out of the repr; ``serving.server.serve`` draws one per run
    when events are on and none is given; see ``serving.events``); ``compare``: a second bundle
    (B) every worker also loads, with the same ``load``, to compare with ``bundle`` (A) on the
    service's users (needs ``events``: the comparison is read back from the log); ``compare_mode``:
    ``interleave`` (every search shows a team-draft interleaving of A's and B's rankings) or ``ab``
    (each user, by client id, is served by A or by B: four buckets, two each);
    ``compare_salt``: the salt of the ``ab`` buckets (a new salt reshuffles the users; see
    ``serving.compare``); ``allow_writes``: take document changes (``POST /documents``, ``DELETE
    /documents/{id}``; ``index.live``), logged in ``changes`` (None: ``<bundle>.changes`` beside
    the bundle); ``write_key``: the key they require (a secret; needed when exposed, and not the
    API key); ``merge_at``: changed documents at which a worker merges them into the bundle in the
    background (0: never)."""

    kind: ClassVar[str] = "serve"

    bundle: str = ""
    load: LoadOptions = dataclasses.field(default_factory=LoadOptions)
    host: str = DEFAULT_HOST
    port: int = param(DEFAULT_PORT, ge=0, le=65535)
    workers: int = param(1, ge=1)
    loop: Literal["asyncio", "uvloop"] = "asyncio"
    expose: bool = False
    api_key: str | None = dataclasses.field(default=None, repr=False)
    rate_limit: float | None = param(None, ge=0)
    events: str | None = None
    events_flush_seconds: float = param(5.0, gt=0)
    event_secret: str | None = dataclasses.field(default=None, repr=False)
    compare: str | None = None
    compare_mode: Literal["interleave", "ab"] = "interleave"
    compare_salt: str = DEFAULT_SALT
    allow_writes: bool = False
    changes: str | None = None
    write_key: str | None = dataclasses.field(default=None, repr=False)
    merge_at: int = param(MERGE_AT, ge=0)
    cluster: str | None = None
    shard_replicas: int = param(1, ge=1)
    replica_cpus: float = param(0.0, ge=0)

    @classmethod
    def from_cli(
        cls,
        bundle: Path,
        *,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        store: str | None = None,
        workers: int = 1,
        loop: str = "asyncio",
        result_cache: int | None = None,
        expose: bool = False,
        api_key_file: Path | None = None,
        rate_limit: float | None = None,
        rescore: bool = False,
        rescore_depth: int | None = None,
        rescore_weight: float | None = None,
        correct_queries: bool = True,
        events: str = "off",
        events_flush_seconds: float | None = None,
        compare: Path | None = None,
        compare_mode: str | None = None,
        compare_salt: str | None = None,
        allow_writes: bool = False,
        changes: Path | None = None,
        merge_at: int | None = None,
        cluster: str | None = None,
        shard_replicas: int | None = None,
        replica_cpus: float | None = None,
        write_key_file: Path | None = None,
    ) -> ServeOptions:
        """The options ``semsearch serve``'s flags ask for (None: a flag not given, its default
        kept). A flag that only means something with another is refused without it, whatever its
        value (``--changes needs --allow-writes``); the keys are read from their files, or else
        from $SEMSEARCH_API_KEY / $SEMSEARCH_WRITE_KEY (the write key only with --allow-writes);
        the paths are made absolute (the worker processes may start elsewhere). The rest is
        ``check``'s, as for any ``ServeOptions``."""
        # each flag that only means something with another: (that one, given?) -> flag -> value (None: not given)
        owners: dict[tuple[str, bool], dict[str, object]] = {
            ("--rescore", rescore): {"--rescore-depth": rescore_depth, "--rescore-weight": rescore_weight},
            ("--events", events != "off"): {"--events-flush-seconds": events_flush_seconds},
            ("--compare", compare is not None): {"--compare-mode": compare_mode, "--compare-salt": compare_salt},
            ("--allow-writes", allow_writes): {
                "--changes": changes,
                "--write-key-file": write_key_file,
                "--merge-at": merge_at,
            },
            ("--cluster", cluster is not None): {"--shard-replicas": shard_replicas, "--replica-cpus": replica_cpus},
        }
        for (owner, present), flags in owners.items():
            needs(owner, present, {flag: value is not None for flag, value in flags.items()})
        api_key, write_key = _keys(api_key_file, write_key_file, allow_writes)
        load: dict[str, Any] = {
            "store": store,
            "rescore": rescore,
            "rescore_depth": rescore_depth,
            "rescore_weight": rescore_weight,
            "correct_queries": correct_queries,
        }
        given = {  # the flags not given keep the fields' defaults
            "events_flush_seconds": events_flush_seconds,
            "compare": None if compare is None else str(compare.resolve()),
            "compare_mode": compare_mode,
            "compare_salt": compare_salt,
            "changes": None if changes is None else str(changes.resolve()),
            "merge_at": merge_at,
            "cluster": cluster,
            "shard_replicas": shard_replicas,
            "replica_cpus": replica_cpus,
        }
        return cls.from_mapping(
            {
                "bundle": str(bundle.resolve()),
                "load": {**load, **({} if result_cache is None else {"result_cache": result_cache})},
                "host": host,
                "port": port,
                "workers": workers,
                "loop": loop,
                "expose": expose,
                "api_key": api_key,
                "rate_limit": rate_limit,
                "events": None if events == "off" else str(Path(events).resolve()),
                "allow_writes": allow_writes,
                "write_key": write_key,
                **{name: value for name, value in given.items() if value is not None},
            }
        )

    def _label(self, name: str) -> str:
        return "serve" if name == "load" else "--" + name.replace("_", "-")

    def check(self) -> None:
        if not self.bundle:
            raise ParamError("serve needs a bundle directory")
        if self.rate_limit is not None and not math.isfinite(self.rate_limit):
            raise ParamError(f"--rate-limit must be a number of requests per second >= 0, got {self.rate_limit}")
        if not math.isfinite(self.events_flush_seconds):
            raise ParamError(f"--events-flush-seconds must be a number of seconds > 0, got {self.events_flush_seconds}")
        if self.events is not None:
            if not self.events.strip():
                raise ParamError("--events needs a directory (or off)")
            events = Path(self.events)
            if events.exists() and not events.is_dir():
                raise ParamError(f"--events {self.events}: not a directory")
        self._check_compare()
        if self.event_secret is not None and len(self.event_secret) < MIN_SECRET_CHARS:
            raise ParamError(f"the event secret must be at least {MIN_SECRET_CHARS} characters")
        if self.api_key is not None:
            try:
                object.__setattr__(self, "api_key", check_key(self.api_key, "the API key"))
            except ExposureError as e:
                raise ParamError(str(e)) from None
        if not is_loopback(self.host):
            if not self.expose:
                raise ParamError(
                    f"--host {self.host} is not a loopback address: serving beyond this machine needs --expose "
                    f"and an API key (${API_KEY_ENV} or --api-key-file)"
                )
            if self.api_key is None:
                raise ParamError(f"--expose needs an API key: set ${API_KEY_ENV} or give --api-key-file")
        self._check_writes()
        self._check_cluster()

    def _check_cluster(self) -> None:
        """``--cluster``: a sharded bundle, served by Ray Serve (one process here: not with
        ``--workers``); ``--shard-replicas`` and ``--replica-cpus`` only with it. A sharded bundle
        takes no writes and is not compared (it is served for searches)."""
        from ..index.bundle.shard import is_sharded

        sharded = is_sharded(self.bundle)
        if self.cluster is None:
            if self.shard_replicas != 1:
                raise ParamError("--shard-replicas needs --cluster")
            if self.replica_cpus != 0:
                raise ParamError("--replica-cpus needs --cluster")
        else:
            if not self.cluster.strip():
                raise ParamError("--cluster needs an address: local, auto, ray://HOST:PORT or HOST:PORT")
            if not sharded:
                raise ParamError(
                    f"--cluster serves a sharded bundle; {self.bundle} is not one ('semsearch index shard' makes one)"
                )
            if self.workers != 1:
                raise ParamError("--cluster: Ray Serve runs the replicas; not with --workers")
        if sharded and (self.allow_writes or self.compare is not None):
            raise ParamError(
                f"{self.bundle} is a sharded bundle: it is served for searches, not with "
                + (
                    "--allow-writes (change the plain bundle and shard it again; docs/scaling.md)"
                    if self.allow_writes
                    else "--compare"
                )
            )

    def _check_writes(self) -> None:
        """``--allow-writes``: not with ``--compare`` or ``--rescore``; ``--changes`` and a write key
        only with it; exposed, it needs a write key, other than the API key."""
        if not self.allow_writes:
            if self.changes is not None:
                raise ParamError("--changes needs --allow-writes")
            if self.merge_at != MERGE_AT:
                raise ParamError("--merge-at needs --allow-writes")
            if self.write_key is not None:
                raise ParamError(f"a write key (${WRITE_KEY_ENV} or --write-key-file) needs --allow-writes")
            return
        if self.compare is not None:
            raise ParamError("--allow-writes serves one changing bundle: not with --compare")
        if self.load.rescore:
            raise ParamError("--allow-writes does not re-score with a cross-encoder: not with --rescore")
        if self.changes is not None and not self.changes.strip():
            raise ParamError("--changes needs a directory")
        if self.write_key is not None:
            try:
                object.__setattr__(self, "write_key", check_key(self.write_key, "the write key"))
            except ExposureError as e:
                raise ParamError(str(e)) from None
            if self.write_key == self.api_key:
                raise ParamError("the write key must differ from the API key (readers must not be able to write)")
        elif self.expose:
            raise ParamError(
                f"--expose --allow-writes needs a write key: set ${WRITE_KEY_ENV} or give --write-key-file"
            )

    def _check_compare(self) -> None:
        """``--compare``: a bundle directory (the served one too: an A/A check), with an event
        log; ``--compare-mode`` and ``--compare-salt`` only with it, the salt only in ab mode."""
        if self.compare is None:
            if self.compare_mode != "interleave":
                raise ParamError("--compare-mode needs --compare")
            if self.compare_salt != DEFAULT_SALT:
                raise ParamError("--compare-salt needs --compare")
            return
        if not self.compare.strip():
            raise ParamError("--compare needs a bundle directory")
        if self.events is None:
            raise ParamError(
                "--compare needs --events DIR: the comparison is read back from the event log "
                "(semsearch clicks compare DIR)"
            )
        if not self.compare_salt.strip():
            raise ParamError("--compare-salt must not be empty")
        if self.compare_salt != DEFAULT_SALT and self.compare_mode != "ab":
            raise ParamError("--compare-salt assigns users to A/B buckets: it needs --compare-mode ab")

    @property
    def exposure(self) -> Exposure:
        """The guards every worker keeps: the API key and the per-client rate."""
        rate = self.rate_limit if self.rate_limit is not None else EXPOSED_RATE if self.expose else 0.0
        return Exposure(self.api_key, rate, self.write_key)


__all__ = ["EXPOSED_RATE", "ServeOptions"]
