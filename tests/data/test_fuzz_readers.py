"""Property-based fuzzing of every reader: each input either parses or is refused with the
project's own error naming the file and the line (or key) — never a bare KeyError, TypeError,
UnicodeDecodeError, JSONDecodeError or IndexError, and never a half-written output.

Inputs are structured-but-corrupted (valid records with fields dropped or retyped, bad UTF-8, a
BOM, CRLF, huge numbers, NaN, duplicate ids, truncation) and random bytes. Profiles: ``ci``
(200 examples per reader, derandomized) by default; ``nightly`` (2,000) with
SEMSEARCH_FUZZ_PROFILE=nightly (``make fuzz``)."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from semsearch.data import (
    DataFormatError,
    DataWarning,
    TrainingData,
    iter_clicks,
    iter_pairs,
    load_corpus,
    load_qrels,
    load_queries,
    load_query_domains,
    read_run,
)

settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "nightly",
    max_examples=2000,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FUZZ = settings.get_profile(os.environ.get("SEMSEARCH_FUZZ_PROFILE", "ci"))
"""The profile every fuzz test runs under (not loaded globally: other tests keep their own)."""

_BOM = b"\xef\xbb\xbf"
_BAD_BYTES = [
    b"\xff",
    b"\xc3",
    b"\x80",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\x00",
    b"\t",
    b"\n",
    b"\r",
    b'"',
    b"{",
    b"\xe2\x80\xa8",
    b"\xc2\x85",
    b"\x1c",
]

# ------------------------------------------------------------------------------ input strategies
SPECIAL_STRINGS = [
    "",
    " ",
    "d1",
    "q1",
    "0",
    "-1",
    "3",
    "2.5",
    "1e309",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "+3",
    "٣",
    "²",
    "9" * 30,
    "9" * 5000,
    "query-id",
    "corpus-id",
    "score",
    "Q0",
    "id",
    "title",
    "text",
    "é",
    "\u00a0",
    "\u2028",
    "\x85",
    "\x0c",
    "\x1c",
    "a b",
    "null",
    "{}",
    "[]",
]
atoms = st.one_of(st.sampled_from(SPECIAL_STRINGS), st.text(max_size=6))
"""One field of a separated line: the strings that trip parsers, and any short text."""

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**20, max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(SPECIAL_STRINGS),
    st.text(max_size=6),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=6,
)
"""Any JSON value (NaN, infinities and integers past 64 bits included), a few levels deep."""


@st.composite
def mutated(draw: st.DrawFn, values: st.SearchStrategy[Any], keys: list[str] | None = None) -> Any:
    """A drawn value (a JSON-like tree) with up to three changes: a key dropped, a value replaced by
    any JSON value, a key added; ``keys`` are the names worth adding (besides random ones)."""
    value = json.loads(json.dumps(draw(values)))
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 1, 2, 3]))):
        paths = list(_paths(value))
        path = draw(st.sampled_from(paths))
        parent, key = _at(value, path[:-1]), path[-1] if path else None
        action = draw(st.sampled_from(["drop", "replace", "add"]))
        if key is None:
            if action == "replace":
                value = draw(json_values)
            continue
        if action == "drop" and isinstance(parent, dict):
            del parent[key]
        elif action == "drop" and isinstance(parent, list):
            parent.pop(key)
        elif action == "replace":
            parent[key] = draw(json_values)
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(keys or ["x"]) | st.text(max_size=4))] = draw(json_values)
    return value


def _paths(value: Any, prefix: tuple = ()) -> Any:
    yield prefix
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        yield from _paths(v, (*prefix, k))


def _at(value: Any, path: tuple) -> Any:
    for k in path:
        value = value[k]
    return value


@st.composite
def corrupted_file(draw: st.DrawFn, lines: st.SearchStrategy[list[str]]) -> bytes:
    """Valid-looking lines joined by LF, CRLF or CR, maybe a duplicated line, a BOM, bad bytes
    spliced in, or the file cut short."""
    rows = draw(lines)
    if rows and draw(st.booleans()):
        rows.insert(draw(st.integers(0, len(rows))), draw(st.sampled_from(rows)))
    sep = draw(st.sampled_from([b"\n", b"\n", b"\r\n", b"\r"]))
    raw = sep.join(r.encode("utf-8") for r in rows) + draw(st.sampled_from([b"", sep, sep + sep]))
    if draw(st.integers(0, 3)) == 0:
        raw = _BOM + raw
    for _ in range(draw(st.sampled_from([0, 0, 0, 0, 1, 2]))):
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.sampled_from(_BAD_BYTES)) + raw[at:]
    if raw and draw(st.integers(0, 7)) == 0:
        raw = raw[: draw(st.integers(0, len(raw)))]
    return raw


def file_bytes(lines: st.SearchStrategy[list[str]]) -> st.SearchStrategy[bytes]:
    """Corrupted structured files, and random bytes (a fifth of the examples)."""
    return st.one_of(
        corrupted_file(lines),
        corrupted_file(lines),
        corrupted_file(lines),
        corrupted_file(lines),
        st.binary(max_size=200),
    )


ids = st.sampled_from(["d1", "d2", "d3", "q1", "q2", "0", "1"])
words = st.text("abc xyzé", min_size=1, max_size=8)
numbers = st.one_of(st.integers(0, 4).map(str), st.sampled_from(["1.5", "-2", "1e3", "7"]))
FIELDS = {"id": ids, "text": words, "int": st.integers(0, 4).map(str), "num": numbers}


def separated(n: int, sep: str = "\t", kinds: list[str] | None = None) -> st.SearchStrategy[str]:
    """A line of ``n`` fields of the given kinds (ids, words, numbers) six times in seven, else
    about ``n`` fields of any tricky strings (one more or fewer now and then)."""
    good = st.tuples(*(FIELDS[k] for k in (kinds or ["text"] * n))).map(sep.join)
    bad = st.integers(max(n - 1, 0), n + 1).flatmap(lambda k: st.lists(atoms, min_size=k, max_size=k)).map(sep.join)
    return st.one_of(good, good, good, good, good, good, bad)


def json_lines(record: st.SearchStrategy[dict], keys: list[str]) -> st.SearchStrategy[list[str]]:
    line = st.one_of(mutated(record, keys), mutated(record, keys), mutated(record, keys), json_values).map(
        lambda v: json.dumps(v, ensure_ascii=False)
    )
    return st.lists(
        st.one_of(line, line, line, line, line, st.sampled_from(["", " ", "{", "[1]", "NaN", '{"_id": "d1"}'])),
        max_size=6,
    )


def tsv_lines(
    n: int, header: list[str] | None = None, sep: str = "\t", kinds: list[str] | None = None
) -> st.SearchStrategy[list[str]]:
    line = separated(n, sep, kinds)
    first = st.just(sep.join(header)) if header else line
    return st.tuples(st.one_of(first, line), st.lists(line, max_size=5)).map(lambda t: [t[0], *t[1]])


# ------------------------------------------------------------------------------ the check
@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for the whole module (hypothesis reruns a test body; tmp_path is per test)."""
    return tmp_path_factory.mktemp("fuzz")


def reads_or_names_line(path: Path, raw: bytes, read: Callable[[Path], Any]) -> Any:
    """Write ``raw`` to ``path`` and read it: a result, or None after a DataFormatError that names
    this file and a line of it (or the whole file). Any other exception fails the test."""
    path.write_bytes(raw)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DataWarning)
            out = read(path)
        event("parsed")  # --hypothesis-show-statistics: how many examples were accepted
        return out
    except DataFormatError as e:
        assert e.path == str(path) and str(e).startswith(f"{path}"), e
        assert e.line is None or 1 <= e.line <= raw.count(b"\n") + raw.count(b"\r") + 1, e
        assert e.message, e
        return None


CORPUS = st.fixed_dictionaries({"_id": ids, "title": words, "text": words})


@FUZZ
@given(raw=file_bytes(json_lines(CORPUS, ["_id", "title", "text"])), skip=st.booleans())
def test_corpus_jsonl(scratch: Path, raw: bytes, skip: bool) -> None:
    corpus = reads_or_names_line(scratch / "corpus.jsonl", raw, lambda p: load_corpus(p, skip_bad_lines=skip))
    if corpus is not None:
        assert len(set(corpus.ids)) == len(corpus) > 0
        assert all(isinstance(x, str) for x in [*corpus.ids, *corpus.titles, *corpus.texts])


@FUZZ
@given(
    raw=file_bytes(tsv_lines(3, ["id", "title", "text"], kinds=["id", "text", "text"])),
    name=st.sampled_from(["docs.tsv", "docs"]),
    skip=st.booleans(),
)
def test_corpus_tsv(scratch: Path, raw: bytes, name: str, skip: bool) -> None:
    """The TSV collection `semsearch index build --data FILE` reads (by suffix or sniffed)."""
    corpus = reads_or_names_line(scratch / name, raw, lambda p: load_corpus(p, skip_bad_lines=skip))
    if corpus is not None:
        assert len(set(corpus.ids)) == len(corpus) > 0 and all(corpus.ids)


@FUZZ
@given(
    raw=st.one_of(
        file_bytes(json_lines(st.fixed_dictionaries({"_id": ids, "text": words}), ["_id", "text"])),
        file_bytes(tsv_lines(2, kinds=["id", "text"])),
    ),
    name=st.sampled_from(["queries.jsonl", "queries.tsv", "queries"]),
    skip=st.booleans(),
)
def test_queries(scratch: Path, raw: bytes, name: str, skip: bool) -> None:
    queries = reads_or_names_line(scratch / name, raw, lambda p: load_queries(p, skip_bad_lines=skip))
    if queries is not None:
        assert queries and all(isinstance(q, str) and q and t.strip() for q, t in queries.items())


@FUZZ
@given(
    raw=st.one_of(
        file_bytes(tsv_lines(3, ["query-id", "corpus-id", "score"], kinds=["id", "id", "int"])),
        file_bytes(tsv_lines(4, sep=" ", kinds=["id", "int", "id", "int"])),
    ),
    skip=st.booleans(),
)
def test_qrels(scratch: Path, raw: bytes, skip: bool) -> None:
    qrels = reads_or_names_line(
        scratch / "qrels.tsv", raw, lambda p: load_qrels(p, doc_ids={"d1", "d2", "0"}, skip_bad_lines=skip)
    )
    if qrels is not None:
        assert all(isinstance(g, int) for docs in qrels.values() for g in docs.values())


@FUZZ
@given(raw=file_bytes(tsv_lines(6, sep=" ", kinds=["id", "id", "id", "int", "num", "id"])), skip=st.booleans())
def test_trec_run(scratch: Path, raw: bytes, skip: bool) -> None:
    run = reads_or_names_line(scratch / "run.trec", raw, lambda p: read_run(p, skip_bad_lines=skip))
    if run is not None:
        assert all(isinstance(s, float) and s == s and abs(s) != float("inf") for d in run.values() for s in d.values())


@FUZZ
@given(raw=file_bytes(tsv_lines(2, ["query", "title"])), skip=st.booleans())
def test_pairs_and_training_data(scratch: Path, raw: bytes, skip: bool) -> None:
    """A pair file, then the training data built from it (data/training.py)."""
    pairs = reads_or_names_line(scratch / "pairs.tsv", raw, lambda p: list(iter_pairs(p, skip_bad_lines=skip)))
    if pairs is not None:
        data = TrainingData.from_pairs(pairs)
        assert len(data.positives) == len(pairs)


@FUZZ
@given(raw=file_bytes(tsv_lines(3, ["query", "doc_id", "clicks"], kinds=["text", "id", "int"])), skip=st.booleans())
def test_clicks(scratch: Path, raw: bytes, skip: bool) -> None:
    rows = reads_or_names_line(scratch / "clicks.tsv", raw, lambda p: list(iter_clicks(p, skip_bad_lines=skip)))
    if rows is not None:
        assert all(isinstance(c, int) and c >= 0 for _, _, c in rows)


@FUZZ
@given(
    raw=st.one_of(
        *(
            file_bytes(tsv_lines(len(h), list(h)))
            for h in [
                ("split", "dialogue_id", "domains", "text"),
                ("split", "domain", "intent", "text"),
                ("split", "intent", "text"),
            ]
        )
    ),
    skip=st.booleans(),
)
def test_query_domains(scratch: Path, raw: bytes, skip: bool) -> None:
    records = reads_or_names_line(scratch / "domains.tsv", raw, lambda p: load_query_domains(p, skip_bad_lines=skip))
    if records is not None:
        assert records and all(r.labels and all(r.labels) and r.text.strip() for r in records)


# ------------------------------------------------------------------------------ spec TOML
def toml_value(v: Any) -> str:
    """A value as TOML (inline tables and arrays; no null in TOML, so None becomes a string)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if v != v else ("inf" if v > 0 else "-inf") if abs(v) == float("inf") else repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    return json.dumps(v if isinstance(v, str) else str(v))


def toml_lines(doc: Any) -> list[str]:
    """A spec as TOML lines: top-level keys, then each model as a ``[[models]]`` table."""
    if not isinstance(doc, dict):
        return [toml_value(doc)]
    lines = [
        f"{json.dumps(k)} = {toml_value(v)}"
        for k, v in doc.items()
        if not (k == "models" and isinstance(v, list) and all(isinstance(m, dict) for m in v))
    ]
    for m in doc.get("models", []) if isinstance(doc.get("models"), list) else []:
        if isinstance(m, dict):
            lines += ["", "[[models]]", *(f"{json.dumps(k)} = {toml_value(v)}" for k, v in m.items())]
    return lines


RANKING_SPEC = {
    "name": "fuzz",
    "title": "T",
    "source": "S",
    "dataset": "tiny",
    "split": "test",
    "candidates": "full:100",
    "metrics": ["ndcg@10"],
    "tune": "split:dev",
    "baselines": ["BM25"],
    "rel_threshold": 1,
    "models": [
        {
            "label": "BM25",
            "model": "bm25",
            "params": {"k1": 0.9},
            "grid": {"b": [0.4, 0.75]},
            "expect": {"ndcg@10": [0.1, 0.9]},
            "paper": {"ndcg@10": 0.5},
        },
        {"label": "ULM", "model": "ulm", "depth": 10},
        {"label": "mix", "model": "interpolate", "combine": ["BM25", "ULM"], "grid": {"weight": [0.5]}},
    ],
}
CLASSIFICATION_SPEC = {
    "name": "fuzz-c",
    "title": "T",
    "source": "S",
    "kind": "classification",
    "domain_set": "sgd",
    "domains": ["a", "b"],
    "fractions": [0.1, 1.0],
    "paper": {"DNN": {"a": 0.9}},
    "expect": {"DNN": {"a": [0.5, 1.0]}},
}
SPEC_KEYS = sorted(
    {
        *RANKING_SPEC,
        *CLASSIFICATION_SPEC,
        "label",
        "model",
        "params",
        "grid",
        "train",
        "combine",
        "depth",
        "hybrid",
        "index",
        "crosstab",
        "gain",
        "queries",
        "fields",
        "norm",
        "analyzer",
    }
)


@FUZZ
@given(
    raw=file_bytes(
        st.one_of(mutated(st.just(RANKING_SPEC), SPEC_KEYS), mutated(st.just(CLASSIFICATION_SPEC), SPEC_KEYS)).map(
            toml_lines
        )
    )
)
def test_spec_toml(scratch: Path, raw: bytes) -> None:
    """A spec file loads, or SpecError names the file (and the line or key)."""
    from semsearch.experiments.spec import ClassificationSpec, ExperimentSpec, SpecError, load_spec

    path = scratch / "spec.toml"
    path.write_bytes(raw)
    try:
        spec = load_spec(path)
    except SpecError as e:
        assert str(e).startswith(f"{path}:"), e
        return
    event("parsed")
    assert isinstance(spec, (ExperimentSpec, ClassificationSpec))
    if isinstance(spec, ExperimentSpec):
        spec.candidate_mode  # noqa: B018 — validated once, so it never fails afterwards
        assert all(isinstance(m.label, str) and isinstance(m.model, str) for m in spec.models)
        assert all(isinstance(x, str) for x in spec.metrics)


# ------------------------------------------------------------------------------ model config.json
DOC_IDS, DOC_TEXTS = ["a", "b", "c"], ["red brick wall", "blue door", "brick door"]


def _saved(kind: str, out: Path) -> Path:
    """A tiny saved model of ``kind`` (indexed or built, no training: seconds for all kinds)."""
    from semsearch.plugins import create_model
    from semsearch.text import TrigramHasher
    from semsearch.text.vocab import Vocabulary

    shapes = {"dssm": {"hidden": [8], "out": 4}, "clsm": {"conv": 8, "out": 4, "window": 3}, "knrm": {"dim": 8}}
    m: Any = create_model(kind, **shapes.get(kind, {}))
    if kind in ("dssm", "clsm"):
        m.build(TrigramHasher.fit(DOC_TEXTS, max_words=8))
    elif kind == "knrm":
        m.build(Vocabulary(["red", "brick", "wall", "blue", "door"]))
    m.index(DOC_IDS, DOC_TEXTS)
    m.save(out / kind)
    return out / kind


MODEL_KINDS = ["bm25", "random", "mrf", "dssm", "clsm", "knrm"]


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict]]:
    """Each kind's model directory and its config as saved."""
    out = tmp_path_factory.mktemp("models")
    dirs = {k: _saved(k, out) for k in MODEL_KINDS}
    return {k: (d, json.loads((d / "config.json").read_text(encoding="utf-8"))) for k, d in dirs.items()}


CONFIG_KEYS = [
    "model",
    "params",
    "analyzer",
    "vocabulary",
    "trigrams",
    "max_words",
    "terms",
    "doc_ids",
    "stem",
    "stopwords",
    "k1",
    "b",
    "out",
    "hidden",
    "conv",
    "window",
    "dim",
    "kernels",
    "seed",
]


@FUZZ
@given(data=st.data(), kind=st.sampled_from(MODEL_KINDS))
def test_model_config_json(saved_models: dict[str, tuple[Path, dict]], data: st.DataObject, kind: str) -> None:
    """A saved model whose config.json is corrupted loads (then ranks), or ModelDirError names
    the model directory; the weights and index files are left as saved."""
    from semsearch.models import Model, ModelDirError, rank
    from semsearch.plugins import load_model

    d, config = saved_models[kind]
    raw = data.draw(
        st.one_of(
            mutated(st.just(config), CONFIG_KEYS).map(lambda c: json.dumps(c, ensure_ascii=False).encode()),
            mutated(st.just(config), CONFIG_KEYS).map(lambda c: json.dumps(c, indent=1).encode()),
            file_bytes(st.just(json.dumps(config, indent=1).splitlines())),
        ),
        label="config.json",
    )
    (d / "config.json").write_bytes(raw)
    try:
        model = load_model(d)
    except ModelDirError as e:
        assert str(d) in str(e), e
        return
    finally:
        (d / "config.json").write_text(json.dumps(config), encoding="utf-8")
    event("parsed")
    assert isinstance(model, Model)
    if list(model.doc_ids) != DOC_IDS:  # encoders save no collection: index it the way it was
        model.index(DOC_IDS, DOC_TEXTS)
    run = rank(model, {"q": "red door"}, {"q": DOC_IDS})
    assert set(run["q"]) == set(DOC_IDS)


# ------------------------------------------------------------------------------ bundle manifest
@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    """A tiny BM25 + DSSM bundle (the DSSM built, not trained) and its JSON files as written."""
    from semsearch.data import Corpus
    from semsearch.index import build_bundle
    from semsearch.plugins import create_model
    from semsearch.text import TrigramHasher

    out = tmp_path_factory.mktemp("bundle")
    dssm: Any = create_model("dssm", hidden=[8], out=4)
    dssm.build(TrigramHasher.fit(DOC_TEXTS, max_words=8))
    p = build_bundle(Corpus(DOC_IDS, DOC_TEXTS, ["", "", ""]), [create_model("bm25"), dssm], out / "b", dataset="t")
    return p, {f: (p / f).read_bytes() for f in BUNDLE_JSON}


BUNDLE_JSON = [
    "manifest.json",
    "models/dssm/retriever.json",
    "models/dssm/index/vector_index.json",
    "models/dssm/index/ids.json",
    "spelling.json",
]
"""The bundle's JSON files that no model directory seals (the manifest's checksums cover them:
the others are fuzzed with verification off)."""


MANIFEST_KEYS = [
    "format",
    "files",
    "models",
    "lexical",
    "ranker",
    "name",
    "path",
    "dim",
    "kind",
    "store",
    "documents",
    "fields",
    "collection",
    "postgres",
    "data",
    "documents.jsonl",
    "../x",
    "/etc/passwd",
    "metric",
    "params",
    "count",
    "model",
    "probes",
    "encoder",
    "batch_size",
    "index_params",
    "efSearch",
    "rescorer",
    "depth",
    "spelling",
    "words",
]


@pytest.mark.parametrize("target", BUNDLE_JSON)
@FUZZ
@given(data=st.data(), verify=st.booleans())
def test_bundle_json_files(
    bundle_dir: tuple[Path, dict[str, bytes]], data: st.DataObject, target: str, verify: bool
) -> None:
    """A bundle whose manifest.json (or, unverified, a vector index's or retriever's JSON) is
    corrupted loads (then searches), or ModelDirError names the bundle."""
    from semsearch.index import Bundle
    from semsearch.models import ModelDirError

    p, saved = bundle_dir
    original = json.loads(saved[target])
    raw = data.draw(
        st.one_of(
            mutated(st.just(original), MANIFEST_KEYS).map(lambda m: json.dumps(m, indent=1).encode()),
            mutated(st.just(original), MANIFEST_KEYS).map(lambda m: json.dumps(m, indent=1).encode()),
            file_bytes(st.just(json.dumps(original, indent=1).splitlines())),
        ),
        label=target,
    )
    (p / target).write_bytes(raw)
    try:
        bundle = Bundle.load(
            p, verify=verify and target == "manifest.json", store="faiss" if data.draw(st.booleans()) else None
        )
    except ModelDirError as e:
        assert str(p) in str(e), e
        return
    finally:
        (p / target).write_bytes(saved[target])  # as built: the manifest's checksums hold again
    event("parsed")
    try:
        hits = bundle.hits(bundle.search("red door", 3))
        assert 1 <= len(hits) <= 3 and {h.doc_id for h in hits} <= set(DOC_IDS)
    finally:
        bundle.close()


# ------------------------------------------------------------------------------ the CLI: no half-written output
@FUZZ
@given(
    raw=file_bytes(tsv_lines(3, ["id", "title", "text"], kinds=["id", "text", "text"])),
    fields=st.sampled_from(["title+text", "title", "text"]),
    skip=st.booleans(),
)
def test_index_build_from_a_tsv_collection(scratch: Path, raw: bytes, fields: str, skip: bool) -> None:
    """`semsearch index build --data FILE.tsv`: a bundle that loads and searches, or exit code 2
    with one `error:` line naming the file, and no bundle nor temporary folder left behind."""
    import shutil

    from typer.testing import CliRunner

    from semsearch.cli import app
    from semsearch.index import Bundle

    src, out = scratch / "collection.tsv", scratch / "cli" / "bundle"
    shutil.rmtree(out.parent, ignore_errors=True)
    src.write_bytes(raw)
    args = ["index", "build", "--data", str(src), "--out", str(out), "--models", "bm25", "--fields", fields]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        r = CliRunner().invoke(app, [*args, "--skip-bad-lines"] if skip else args)
    if r.exit_code == 0:
        event("parsed")
        bundle = Bundle.load(out)
        try:
            assert len(bundle.corpus) >= 1 and bundle.search("a", 3).hits is not None
        finally:
            bundle.close()
        return
    msg = " ".join(r.output.split())
    assert r.exit_code == 2 and "error:" in msg and "Traceback" not in msg, (msg, r.exception)
    assert "collection.tsv" in msg, msg
    assert not out.parent.exists() or not any(out.parent.iterdir()), list(out.parent.iterdir())


@FUZZ
@given(raw=file_bytes(st.lists(st.one_of(words, atoms), max_size=6)), side=st.sampled_from(["query", "document"]))
def test_encode_a_text_file(scratch: Path, saved_models: dict[str, tuple[Path, dict]], raw: bytes, side: str) -> None:
    """`semsearch encode --texts FILE`: one row per line of the file (lines end at LF only), or
    exit code 2 naming the file and no .npy written."""
    import numpy as np
    from typer.testing import CliRunner

    from semsearch.cli import app

    src, out = scratch / "texts.txt", scratch / "enc" / "vectors.npy"
    src.write_bytes(raw)
    out.unlink(missing_ok=True)
    r = CliRunner().invoke(
        app, ["encode", "--model", str(saved_models["dssm"][0]), "--texts", str(src), "--out", str(out), "--side", side]
    )
    if r.exit_code == 0:
        event("parsed")
        lines = raw.split(b"\n")
        assert np.load(out, allow_pickle=False).shape == (len(lines) - (lines[-1] == b""), 4)
        return
    msg = " ".join(r.output.split())
    assert r.exit_code == 2 and "error:" in msg and "texts.txt" in msg and "Traceback" not in msg, (msg, r.exception)
    assert not (out.parent.exists() and any(out.parent.iterdir())), list(out.parent.iterdir())
