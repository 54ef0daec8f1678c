"""The command line, end to end on a generated data set (typer's runner, real files)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from semsearch.cli import app
from semsearch.data import DataWarning

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_help_lists_the_commands():
    r = invoke("--help")
    assert r.exit_code == 0
    for cmd in ("data", "run", "evaluate", "search", "reproduce", "index"):
        assert cmd in r.output


def test_data_list_and_info(tiny_data):
    r = invoke("data", "list")
    assert r.exit_code == 0 and "tiny" in r.output
    r = invoke("data", "info", "tiny", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["documents"] == 60


def test_run_then_evaluate(tiny_data, tmp_path):
    bm25, rnd = tmp_path / "bm25.trec", tmp_path / "random.trec"
    assert (
        invoke(
            "run",
            "--model",
            "bm25",
            "--data",
            "tiny",
            "--candidates",
            "judged",
            "--out",
            str(bm25),
            "--param",
            "k1=1.2",
        ).exit_code
        == 0
    )
    assert (
        invoke("run", "--model", "random", "--data", "tiny", "--candidates", "judged", "--out", str(rnd)).exit_code == 0
    )
    qrels = tiny_data / "tiny" / "qrels" / "test.tsv"
    j = tmp_path / "table.json"
    r = invoke("evaluate", "--qrels", str(qrels), str(rnd), str(bm25), "--metrics", "ndcg@3,map", "--json", str(j))
    assert r.exit_code == 0 and "| bm25 |" in r.output and "NDCG@3" in r.output
    rows = {row["label"]: row for row in json.loads(j.read_text())["rows"]}
    assert rows["bm25"]["mean"]["ndcg@3"] > rows["random"]["mean"]["ndcg@3"]


def test_run_full_and_rerank_a_run_file_and_queries_file(tiny_data, tmp_path):
    out = tmp_path / "full.trec"
    assert (
        invoke(
            "run",
            "--model",
            "ulm",
            "--data",
            "tiny",
            "--candidates",
            "full",
            "--k",
            "5",
            "--param",
            "mu=50",
            "--out",
            str(out),
        ).exit_code
        == 0
    )
    lines = out.read_text().splitlines()
    assert lines and all(int(line.split()[3]) <= 5 for line in lines)
    qfile = tmp_path / "q.tsv"
    qfile.write_text("x1\tred cat\nx2\tblue\n")
    rr = tmp_path / "rr.trec"
    r = invoke(
        "run",
        "--model",
        "tfidf",
        "--data",
        "tiny",
        "--queries",
        str(qfile),
        "--candidates",
        str(tiny_data / "tiny" / "runs" / "first.trec"),
        "--k",
        "3",
        "--out",
        str(rr),
    )
    assert r.exit_code == 0
    # queries x1/x2 are not in the run file: they get no candidates, hence no lines
    assert rr.read_text() == ""


def test_index_build_withvector_params(tiny_data, tmp_path, trained_clsm):
    """``--vector-param`` reaches the bundle's vector index (and is saved with it)."""
    from semsearch.index import Bundle

    trained_clsm(0, "dssm").save(tmp_path / "enc")
    r = invoke(
        "index",
        "build",
        "--data",
        "tiny",
        "--models",
        f"bm25,{tmp_path / 'enc'}",
        "--out",
        str(tmp_path / "B"),
        "--vector-index",
        "hnswsq",
        "--vector-param",
        "efSearch=24",
        "--vector-param",
        "M=8",
    )
    assert r.exit_code == 0, r.output
    ix = next(iter(Bundle.load(tmp_path / "B").semantic.values())).vectors
    assert ix.kind == "hnswsq" and ix.params == {"M": 8, "efConstruction": 200, "efSearch": 24}


def test_vector_params_are_checked_without_the_vectors():
    """Names and integer values are checked before anything is encoded, for every kind, and only
    those: ivfpq's sub-quantisers must divide the vectors' dimension, unknown until they exist."""
    from semsearch.cli.common import vector_params

    assert vector_params("ivfpq", []) == {} and vector_params("ivfpq", ["nprobe=64", "m=48"]) == {
        "nprobe": 64,
        "m": 48,
    }
    assert vector_params("hnswsq", ["efSearch=64"]) == {"efSearch": 64}
    with pytest.raises(ValueError, match="kind must be one of"):
        vector_params("annoy", [])


def test_typed_requests_check_their_flags_together(tmp_path):
    """The commands' typed objects refuse a flag given without the one it needs, whatever its
    value (the default too), naming both, before anything is read; a good request carries the
    options the layer below reads."""
    from semsearch.cli.build import BuildRequest
    from semsearch.serving.options import ServeOptions

    with pytest.raises(ValueError, match="--merge-at needs --allow-writes"):
        ServeOptions.from_cli(tmp_path / "none", merge_at=5000)
    with pytest.raises(ValueError, match="--rescore-weight needs --rescorer"):
        BuildRequest("tiny", tmp_path / "B", rescore_weight=1.0)
    with pytest.raises(ValueError, match="--max-record-bytes needs a file as --data"):
        BuildRequest(str(tmp_path / "none"), tmp_path / "B", max_record_bytes=10)
    ok = BuildRequest(str(tmp_path / "none"), tmp_path / "B", vector_index="hnsw", vector_param=["efSearch=64"])
    assert ok.names == ["bm25"] and not ok.table and ok.options.index_params == {"efSearch": 64}


def test_index_build_and_search(tiny_data, tmp_path):
    idx = tmp_path / "idx"
    assert invoke("index", "build", "--data", "tiny", "--out", str(idx), "--analyzer", "english").exit_code == 0
    r = invoke("search", "--index", str(idx), "red cats", "-k", "3", "--json")
    hits = [json.loads(line) for line in r.output.splitlines()]
    assert r.exit_code == 0 and len(hits) == 3 and all("red" in h["title"] or "cat" in h["title"] for h in hits)
    # rebuilding replaces the index atomically and leaves no temporary directories behind
    assert invoke("index", "build", "--data", "tiny", "--out", str(idx), "--model", "ulm").exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_bad_input_exits_2_with_one_line(tiny_data, tmp_path):
    cases = [
        ("run", "--model", "bm99", "--data", "tiny", "--out", str(tmp_path / "x.trec")),
        ("run", "--model", "bm25", "--data", "nowhere", "--out", str(tmp_path / "x.trec")),
        ("run", "--model", "bm25", "--data", "tiny", "--param", "k1", "--out", str(tmp_path / "x.trec")),
        ("search", "--index", str(tmp_path), "x"),
        ("search", "--index", str(tmp_path), "  "),
        ("reproduce", "no-such-table"),
        ("reproduce",),
    ]
    for args in cases:
        r = runner.invoke(app, list(args))
        assert r.exit_code == 2, (args, r.output)
        assert "error:" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "x.trec").exists()


def test_broken_data_names_file_and_line(tmp_path, monkeypatch):
    d = tmp_path / "broken"
    (d / "qrels").mkdir(parents=True)
    (d / "corpus.jsonl").write_text('{"_id": "a", "title": "t", "text": ""}\n{"_id": "b", "title": \n')
    (d / "queries.jsonl").write_text('{"_id": "q", "text": "t"}\n')
    (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\ta\t1\n")
    r = runner.invoke(app, ["run", "--model", "bm25", "--data", str(d), "--out", str(tmp_path / "r.trec")])
    assert r.exit_code == 2 and "corpus.jsonl" in r.output and ":2" in r.output
    with pytest.warns(DataWarning, match="skipped 1 bad line"):
        r = runner.invoke(
            app, ["run", "--model", "bm25", "--data", str(d), "--skip-bad-lines", "--out", str(tmp_path / "r.trec")]
        )
    assert r.exit_code == 0 and (tmp_path / "r.trec").read_text().startswith("q Q0 a 1")


def test_reproduce_list_and_a_spec_file(tiny_data, tmp_path):
    r = invoke("reproduce", "--list")
    assert r.exit_code == 0 and "clsm-table5-lexical" in r.output
    spec = tmp_path / "t.toml"
    spec.write_text("""
name = "t"
title = "T"
source = "test"
dataset = "tiny"
split = "test"
candidates = "judged"
metrics = ["ndcg@1"]

[[models]]
label = "BM25"
model = "bm25"
expect = { "ndcg@1" = [0.0, 0.01] }
""")
    r = runner.invoke(app, ["reproduce", str(spec), "--out", str(tmp_path / "res")])
    assert r.exit_code == 1 and "out of range" in r.output  # the check fails on purpose
    assert (tmp_path / "res" / "t.md").is_file() and (tmp_path / "res" / "t.json").is_file()
    assert runner.invoke(app, ["reproduce", str(spec), "--out", str(tmp_path / "res"), "--no-check"]).exit_code == 0


@pytest.mark.parametrize(
    "args,says",
    [
        (["run", "--param", "k1"], ["--param 'k1': expected NAME=VALUE", "got 'k1'"]),
        (["run", "--param", "=3"], ["--param '=3': expected NAME=VALUE"]),
        (["run", "--param", "k1=high"], ["--param: bm25 parameter 'k1' must be a number, got 'high'"]),
        (["run", "--param", "k1=[1,2"], ["--param k1: cannot read '[1,2' as JSON"]),
        (["run", "--param", "k1x=1"], ["bm25 has no parameter 'k1x' (did you mean 'k1'?)"]),
        (
            ["run", "--param", "stats=pooled"],
            ["'stats' must be one of 'collection', 'exclude-query-pool', got 'pooled'"],
        ),
        (["run", "--model", "./nope"], ["no model at ./nope"]),
        (["index", "build", "--models", "bm25,./nope"], ["no model at ./nope"]),
        (
            ["index", "build", "--vector-index", "hnswsq", "--vector-param", "efsearch=64"],
            ["--vector-param: hnswsq index has no parameters ['efsearch']; known: ['M', 'efConstruction', 'efSearch']"],
        ),
        (
            ["index", "build", "--vector-index", "hnsw", "--vector-param", "efSearch=6.5"],
            ["--vector-param efSearch: expected an integer, got 6.5"],
        ),
        (["train", "bm25"], ["bm25 (lexical family) is not trainable"]),
        (
            ["train", "lambdamart", "--param", "num_leaves=lots"],
            ["lambdamart parameter 'num_leaves' must be a whole number, got 'lots'"],
        ),
        (
            ["train", "dssm", "--hold-out", "3/2"],
            ["--hold-out '3/2': expected I/N, fold I of N counted from 1 (1 <= I <= N, N >= 2)"],
        ),
        (["train", "dssm", "--hold-out", "half"], ["--hold-out 'half': expected I/N, fold I of N counted from 1"]),
        (["train", "dssm", "--hold-out", "0/2"], ["--hold-out '0/2': expected I/N, fold I of N counted from 1"]),
        (
            ["index", "build", "--models", "bm25", "--train-ranker", "--ranker-param", "train_fold=1/1"],
            ["lambdamart training parameter 'train_fold' '1/1': expected I/N, fold I of N counted from 1"],
        ),
    ],
)
def test_cli_edges_name_the_parameter(tiny_data, tmp_path, args, says):
    base = {
        "run": ["--model", "bm25", "--data", "tiny", "--out", str(tmp_path / "x.trec")],
        "index": ["--data", "tiny", "--out", str(tmp_path / "B")],
        "train": ["--data", "tiny", "--out", str(tmp_path / "m")],
    }[args[0]]
    r = runner.invoke(app, [*args, *base] if args[0] != "run" or "--model" not in args else [*args, *base[2:]])
    msg = " ".join(r.output.split())
    assert r.exit_code == 2 and all(s in msg for s in says), msg
    assert not any((tmp_path / n).exists() for n in ("x.trec", "B", "m"))


def test_string_params_still_work(tiny_data, tmp_path):
    out = tmp_path / "x.trec"
    r = runner.invoke(
        app,
        [
            "run",
            "--model",
            "bm25",
            "--data",
            "tiny",
            "--candidates",
            "judged",
            "--param",
            "stats=exclude-query-pool",
            "--param",
            "k1=1.2",
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    assert out.read_text().strip()


def test_serve_on_a_busy_port_fails_before_serving(tiny_data, tmp_path):
    """A port another process listens on: exit 2 naming the port, before any 'serving ...' line."""
    import socket

    idx = tmp_path / "idx"
    assert invoke("index", "build", "--data", "tiny", "--out", str(idx)).exit_code == 0
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = runner.invoke(app, ["serve", str(idx), "--port", str(port)])
    msg = " ".join(r.output.split())
    assert r.exit_code == 2 and f"port {port}" in msg and "error:" in msg, msg
    assert "serving" not in msg


def test_serve_options_are_checked_before_loading(tmp_path):
    """--loop and --result-cache are refused with a message naming them (no bundle is read)."""
    r = runner.invoke(app, ["serve", str(tmp_path / "none"), "--loop", "tokio"])
    assert r.exit_code == 2 and "--loop must be one of 'asyncio', 'uvloop', got 'tokio'" in " ".join(r.output.split())
    r = runner.invoke(app, ["serve", str(tmp_path / "none"), "--result-cache", "-1"])
    msg = " ".join(r.output.split())
    assert r.exit_code == 2 and "bundle load parameter 'result_cache' must be >= 0, got -1" in msg


def _help(columns: str, *command: str) -> str:
    """``semsearch COMMAND --help`` as a terminal of ``columns`` columns prints it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "COLUMNS": columns, "PYTHONPATH": src}
    r = subprocess.run(
        [sys.executable, "-m", "semsearch.cli", *command, "--help"], env=env, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("columns", ["60", "200"])
def test_help_prints_every_option_in_full_at_any_width(columns):
    """``--help`` is click's plain help: each text wrapped to the terminal, never cut with "…" (as
    rich's boxes did at 80 columns, e.g. ``stage_depths=[[10…``)."""
    text = _help(columns, "index", "build")
    assert "…" not in text
    whole = "".join(text.split())  # wrapping may break a line anywhere, but loses nothing
    for part in (
        "--train-ranker: ranker parameter NAME=VALUE (repeatable), e.g. stage_depths=[[100,100]].",
        "Vector index kind: flat, hnsw, hnswsq (HNSW over 8-bit codes, hits re-scored exactly) or ivfpq.",
        "[default: title+text]",
    ):
        assert "".join(part.split()) in whole, part
    assert max(map(len, text.splitlines())) <= int(columns)
    served = _help(columns, "serve")
    assert "…" not in served and "docs/serving.md" in "".join(served.split())
