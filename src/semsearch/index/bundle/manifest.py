"""A bundle's manifest: its format, its files' sha256 checksums, and the shape checks every
loader relies on."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...models.base import ModelDirError
from ...models.base import sha256_file as _sha256
from ..semantic import encoder_id

MANIFEST = "manifest.json"
SHARDED = "sharded.json"
"""A sharded bundle's coordinator manifest (``shard``; a sharded bundle has no ``manifest.json``)."""
FORMAT = 2
STORES = ("faiss", "postgres")
SPELLING = "spelling.json"  # the bundle's spelling corrector (its documents' word counts)


_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_FIELDS = ("title+text", "title", "text")


def _manifest_error(p: Path, key: str, what: str, value: Any) -> ModelDirError:
    return ModelDirError(f"{p / MANIFEST}: {key!r} must be {what}, got {value!r}"[:500])


def _rel_path(p: Path, value: Any, key: str) -> str:
    """A path inside the bundle (relative, no '..'), as the manifest names its files and models."""
    if (
        not isinstance(value, str)
        or not value
        or Path(value).is_absolute()
        or ".." in Path(value).parts
        or "\\" in value
        or "\x00" in value
    ):
        raise _manifest_error(p, key, "a relative path inside the bundle", value)
    return value


def _entry(p: Path, value: Any, key: str, *, encoder: bool = False) -> dict[str, Any]:
    """One ``lexical`` / ``ranker`` / ``rescorer`` / ``models[i]`` entry: a name and a path (encoders: kind, dim)."""
    if not isinstance(value, dict):
        raise _manifest_error(p, key, "a table", value)
    if not isinstance(value.get("name"), str) or not value["name"]:
        raise _manifest_error(p, f"{key}.name", "a model name", value.get("name"))
    _rel_path(p, value.get("path"), f"{key}.path")
    if encoder:
        dim = value.get("dim")
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
            raise _manifest_error(p, f"{key}.dim", "a positive integer", dim)
        if "collection" in value and not isinstance(value["collection"], str):
            raise _manifest_error(p, f"{key}.collection", "a collection name", value["collection"])
    return value


def read_manifest(p: Path) -> dict[str, Any]:
    """``manifest.json`` of bundle ``p``, its shape checked once (the one place): every key the
    loader reads has its type, every path stays inside the bundle. ModelDirError names the file
    and the key, what it must be and what it is."""
    f = p / MANIFEST
    try:
        manifest = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelDirError(f"{p}: unreadable {MANIFEST} ({e})") from None
    if not isinstance(manifest, dict):
        raise _manifest_error(p, "(top level)", "a table", type(manifest).__name__)
    if manifest.get("format") != FORMAT:
        raise ModelDirError(f"{p}: bundle format {manifest.get('format')!r} is not {FORMAT}; rebuild it")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise _manifest_error(p, "files", "a table of file -> sha256", files)
    for rel, digest in files.items():
        _rel_path(p, rel, f"files.{rel}")
        if not isinstance(digest, str) or not _SHA256.match(digest):
            raise _manifest_error(p, f"files.{rel}", "a sha256 hex digest", digest)
    if "documents.jsonl" not in files:
        raise ModelDirError(f"{f}: 'files' does not list documents.jsonl")
    docs = manifest.get("documents")
    if docs is not None and (not isinstance(docs, int) or isinstance(docs, bool) or docs < 0):
        raise _manifest_error(p, "documents", "a document count", docs)
    if manifest.get("fields", "title+text") not in _FIELDS:
        raise _manifest_error(p, "fields", f"one of {', '.join(_FIELDS)}", manifest.get("fields"))
    schema = manifest.get("schema")
    if schema is not None and (
        not isinstance(schema, dict)
        or not isinstance(schema.get("id"), str)
        or any(
            not isinstance(schema.get(k, []), list) or not all(isinstance(c, str) for c in schema.get(k, []))
            for k in ("fields", "facets", "numeric", "stored")
        )
    ):
        raise _manifest_error(p, "schema", "a table of id and column lists (fields, facets, numeric, stored)", schema)
    if manifest.get("store", "faiss") not in STORES:
        raise _manifest_error(p, "store", f"one of {', '.join(STORES)}", manifest.get("store"))
    if not isinstance(manifest.get("postgres", {}), dict):
        raise _manifest_error(p, "postgres", "a table", manifest.get("postgres"))
    for key in ("lexical", "ranker", "rescorer"):
        if manifest.get(key) is not None:
            _entry(p, manifest[key], key)
    depth = (manifest.get("rescorer") or {}).get("depth", 10)
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
        raise _manifest_error(p, "rescorer.depth", "a positive integer", depth)
    sp = manifest.get("spelling")
    if sp is not None:
        if not isinstance(sp, dict):
            raise _manifest_error(p, "spelling", "a table", sp)
        _rel_path(p, sp.get("path"), "spelling.path")
    models = manifest.get("models", [])
    if not isinstance(models, list):
        raise _manifest_error(p, "models", "a list", models)
    for i, m in enumerate(models):
        _entry(p, m, f"models[{i}]", encoder=True)
    names = [m["name"] for m in models]
    if len(set(names)) != len(names):
        raise _manifest_error(p, "models", "entries with distinct names", names)
    if manifest.get("lexical") is None and not models:
        raise ModelDirError(f"{f}: names neither a lexical model nor a neural one")
    return manifest


def verify_files(p: Path, files: Mapping[str, str], manifest: str = MANIFEST) -> None:
    """Every file the manifest lists is there with its sha256, and nothing else is (a file
    added or swapped in from elsewhere is refused, not served); ``manifest``: the listing file's
    name (a bundle's, or a shard's: ``shard``)."""
    for rel, digest in files.items():
        f = p / rel
        if not f.is_file():
            raise ModelDirError(f"{p}: missing file {rel} (listed in {manifest} 'files')")
        found = _sha256(f)
        if found != digest:
            raise ModelDirError(
                f"{p}: checksum mismatch for {rel}: {manifest} 'files' says sha256 {digest[:12]}…, "
                f"the file has {found[:12]}… (bundle modified or corrupt)"
            )
    extra = sorted(
        x.relative_to(p).as_posix()
        for x in p.rglob("*")
        if x.is_file() and x.name != manifest and x.relative_to(p).as_posix() not in files
    )
    if extra:
        raise ModelDirError(
            f"{p}: file {extra[0]} is not listed in {manifest} 'files' ({len(extra)} unlisted; bundle modified)"
        )


def same_name(p: Path, key: str, manifest_name: str, model: Any) -> None:
    """The model loaded from ``key``'s directory is the one the manifest names."""
    found = encoder_id(model)
    if found != manifest_name:
        raise ModelDirError(
            f"{p / MANIFEST}: {key!r} says {manifest_name!r}, but its directory holds a {found!r} model"
        )
