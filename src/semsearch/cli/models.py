"""``semsearch classify``, ``encode``, ``export-onnx`` and ``explain``: use a trained model."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from .common import (
    app,
    check_onnx,
    err,
    guard,
    onnx_models,
    out,
)


@app.command("classify")
@guard
def classify_cmd(
    queries: Annotated[list[str], typer.Argument(help="Query texts to classify.")],
    model: Annotated[Path, typer.Option(help="Saved MT-DNN directory (semsearch train mt-dnn ...).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """P(domain | query) for every classification domain of a trained MT-DNN."""
    from ..models.mtdnn import MTDNN
    from ..plugins import load_model

    m = load_model(model)
    if not isinstance(m, MTDNN):
        raise ValueError(f"{model}: a {m.name} model; classify needs an mt-dnn model")
    probs = m.classify(queries)
    if as_json:
        out.print_json(
            json.dumps(
                [
                    {"query": q, **{d: float(p) for d, p in zip(m.domains, row, strict=True)}}
                    for q, row in zip(queries, probs, strict=True)
                ]
            )
        )
        return
    table = Table("query", *m.domains)
    for q, row in zip(queries, probs, strict=True):
        table.add_row(q, *(f"{p:.3f}" for p in row))
    out.print(table)


@app.command("encode")
@guard
def encode_cmd(
    model: Annotated[Path, typer.Option(help="Saved encoder directory (dssm, clsm, ...).")],
    texts: Annotated[Path, typer.Option(help="Texts: one per line, or BEIR queries.jsonl / corpus.jsonl.")],
    out_path: Annotated[
        Path,
        typer.Option(
            "--out",
            help="Output .npy file: float32, one row per text (unit length except bert-rep's dot-product vectors).",
        ),
    ],
    side: Annotated[str, typer.Option(help="'query' or 'document' tower.")] = "document",
    shard: Annotated[
        str | None,
        typer.Option(
            help="I/N: encode only part I of N of the texts (from 1), resumable; index from-shards joins them."
        ),
    ] = None,
    ray: Annotated[
        int,
        typer.Option(
            "--ray",
            help="N > 0: encode N shards as Ray Data tasks (semsearch[ray]); --out is then a shared folder.",
        ),
    ] = 0,
    ray_address: Annotated[
        str | None,
        typer.Option(
            help="With --ray: the Ray cluster's address (default: a running local Ray, else one started here)."
        ),
    ] = None,
) -> None:
    """Encode texts with a trained encoder into a .npy matrix (rows in input order)."""
    from ..index.sharded import encode_file, parse_shard

    part = parse_shard(shard) if shard is not None else None  # validated before the model is read
    if side not in ("query", "document"):
        raise ValueError("--side must be 'query' or 'document'")
    if ray < 0 or (ray and part is not None):
        raise ValueError("--ray N: N shards (N > 0), not together with --shard")
    if ray:
        from ..index.sharded import encode_with_ray

        start = time.perf_counter()
        shards = encode_with_ray(model, texts, out_path, ray, side=side, address=ray_address)
        err.print(
            f"wrote {len(shards)} shards into {out_path} with Ray ({sum(s.skipped for s in shards)} already complete, "
            f"{sum(s.rows for s in shards):,} texts) in {time.perf_counter() - start:.1f} s",
            highlight=False,
        )
        return
    done = encode_file(model, texts, out_path, side=side, shard=part)
    if done.skipped:
        err.print(f"{done.path}: shard {part} already written, skipped", highlight=False)
    else:
        err.print(
            f"wrote {done.path}: {done.rows} x {done.dim} in {done.seconds:.2f} s "
            f"({done.rows / max(done.seconds, 1e-9):,.0f} texts/s)",
            highlight=False,
        )


@app.command("export-onnx")
@guard
def export_onnx_cmd(
    model: Annotated[Path, typer.Argument(help="Saved transformer model directory (bert-rep or bert-rel).")],
    precision: Annotated[
        str,
        typer.Option(
            help="fp32 (checked against torch's outputs) or int8 (dynamic quantisation; see docs/benchmarks.md)."
        ),
    ] = "fp32",
) -> None:
    """Write model.onnx + onnx.json into a saved transformer's folder: its inference (encoding,
    scoring, the service's query encoder) then runs through ONNX Runtime on the CPU."""
    from ..models.base import seal
    from ..models.transformer import TransformerModel
    from ..plugins import load_model

    check_onnx(precision)
    if precision == "off":
        raise ValueError("--precision must be fp32 or int8")
    m = load_model(model)
    if not isinstance(m, TransformerModel):
        raise ValueError(f"{model}: a {m.name} model is not a transformer (bert-rep or bert-rel)")
    onnx_models([m], precision)
    m.save_onnx(model)
    seal(model)  # the folder's checksums now cover the export
    err.print(f"wrote {model / 'model.onnx'} ({precision})", highlight=False)


@app.command("explain")
@guard
def explain_cmd(
    query: Annotated[str, typer.Argument(help="Query text.")],
    document: Annotated[str, typer.Argument(help="Document (title) text.")],
    model: Annotated[Path, typer.Option(help="Saved DSSM or CLSM directory.")],
    top: Annotated[int, typer.Option(help="Neurons / words to show.")] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Why the model matches a query and a document: winning words and shared neurons (CLSM), word
    contributions (any encoder)."""
    from ..models.explain import explain
    from ..models.neural import NeuralEncoder
    from ..plugins import load_model

    m = load_model(model)
    if not isinstance(m, NeuralEncoder):
        raise ValueError(f"{model}: explain needs a neural encoder, got {m.name}")
    if not query.strip() or not document.strip():
        raise ValueError("query and document must not be empty")
    e = explain(m, query, document, top=top)
    if as_json:
        print(json.dumps(e, ensure_ascii=False, indent=2))
        return
    out.print(f"[bold]{m.name}[/] cosine = {e['cosine']:.4f}", highlight=False)
    for side in ("query", "document"):
        if f"{side}_neurons" in e:
            t = Table("neuron", "activation", "winning word", "window", title=f"most active max-pool neurons: {side}")
            for n in e[f"{side}_neurons"]:
                t.add_row(str(n["neuron"]), f"{n['activation']:.3f}", n["word"], n["window"])
            out.print(t)
    if e.get("matching_neurons"):
        t = Table("neuron", "query word", "act.", "document word", "act.", title="neurons active on both sides")
        for n in e["matching_neurons"]:
            t.add_row(
                str(n["neuron"]),
                n["query_word"],
                f"{n['query_activation']:.3f}",
                n["document_word"],
                f"{n['document_activation']:.3f}",
            )
        out.print(t)
    for side in ("query", "document"):
        words = ", ".join(f"{w['word']} ({w['contribution']:+.3f})" for w in e[f"{side}_words"][:top])
        out.print(f"{side} words by contribution to the cosine: {words}", highlight=False)
