"""Joining a Ray cluster: the one way the Ray Serve service (``serving.cluster``) and the Ray Data
jobs (``clicks.distributed``) name and reach one."""

from __future__ import annotations

ADDRESSES = "local, auto, HOST:PORT or ray://HOST:10001"


def connect(address: str) -> bool:
    """Ray initialised for ``address``: "local" (a new cluster in this process), "auto" (the one
    ``ray start`` runs on this machine), ``HOST:PORT`` (a cluster's GCS address) or
    ``ray://HOST:10001`` (a remote one through Ray Client). True when this process started the
    cluster (and so stops it, ``ray.shutdown``); nothing is done when Ray is already initialised."""
    import ray

    if not address.strip():
        raise ValueError(f"a Ray cluster address is needed: {ADDRESSES}")
    if ray.is_initialized():
        return False
    if address == "local":  # (explicitly: a bare init would join a cluster 'ray start' left here)
        ray.init(address="local", include_dashboard=False, log_to_driver=False)
        return True
    try:
        ray.init(address=address, log_to_driver=False)
    except (ConnectionError, ValueError, RuntimeError) as e:
        raise ValueError(f"cannot reach a Ray cluster at {address!r} ({e}); an address is {ADDRESSES}") from None
    return False
