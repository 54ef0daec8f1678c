"""Why a neural encoder matches a query and a document.

- CLSM (Shen et al. 2014 §5.4, Table 3 and Figure 4): each max-pooling neuron is won by one word
  position; the five most active neurons of a text and the words that win them show what the
  model picked up, and neurons that are highly active on both sides show where query and title
  meet semantically.
- Any encoder (DSSM included): a word's contribution is how much the cosine drops when that
  word is removed from its text (leave-one-word-out), the words "whose trigrams contribute most".

Plain data out (dicts), so the CLI prints it and the service returns it as JSON."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .neural import CLSM, NeuralEncoder, segment_max


def explain(model: NeuralEncoder, query: str, document: str, *, top: int = 5) -> dict[str, Any]:
    """Cosine, per-word contributions on both sides, and for CLSM the winning words of the most
    active max-pool neurons and the neurons active on both sides."""
    q_words, d_words = model.hasher.words(query), model.hasher.words(document)  # type: ignore[union-attr]  # trained model
    out: dict[str, Any] = {
        "model": model.name,
        "cosine": _cosine(model, query, document),
        "query_words": word_contributions(model, q_words, document, side="query"),
        "document_words": word_contributions(model, d_words, query, side="document"),
    }
    if isinstance(model, CLSM):
        qn, dn = neuron_winners(model, query, "query"), neuron_winners(model, document, "document")
        out["query_neurons"] = sorted(qn, key=lambda n: -n["activation"])[:top]
        out["document_neurons"] = sorted(dn, key=lambda n: -n["activation"])[:top]
        both = sorted(zip(qn, dn), key=lambda p: -min(p[0]["activation"], p[1]["activation"]))
        out["matching_neurons"] = [
            {
                "neuron": a["neuron"],
                "query_activation": a["activation"],
                "document_activation": b["activation"],
                "query_word": a["word"],
                "document_word": b["word"],
                "query_window": a["window"],
                "document_window": b["window"],
            }
            for a, b in both[:top]
            if min(a["activation"], b["activation"]) > 0
        ]
    return out


def _cosine(model: NeuralEncoder, query: str, document: str) -> float:
    return float(model.encode_queries([query])[0] @ model.encode_documents([document])[0])


def word_contributions(model: NeuralEncoder, words: list[str], other: str, *, side: str) -> list[dict[str, Any]]:
    """For each word of one side: cosine(full) − cosine(without that word), biggest first."""
    if not words:
        return []
    texts = [" ".join(words)] + [" ".join(words[:i] + words[i + 1 :]) for i in range(len(words))]
    if side == "query":
        vecs, fixed = model.encode_queries(texts), model.encode_documents([other])[0]
    else:
        vecs, fixed = model.encode_documents(texts), model.encode_queries([other])[0]
    sims = vecs @ fixed
    rows = [{"word": w, "position": i, "contribution": float(sims[0] - sims[i + 1])} for i, w in enumerate(words)]
    return sorted(rows, key=lambda r: -r["contribution"])


def neuron_winners(model: CLSM, text: str, side: str) -> list[dict[str, Any]]:
    """For every max-pool neuron of one side: its activation tanh(max conv) and the word
    position (centre of the winning window) that produced it."""
    batch = model.features([text]).batch(np.array([0]))  # (an untrained model fails here)
    tower = model.net.q if side == "query" else model.net.d  # type: ignore[union-attr]  # trained model
    words = model.hasher.words(text)  # type: ignore[union-attr]  # trained model
    half = (model.p.window - 1) // 2
    with torch.inference_mode():
        conv = tower.convolve(batch)
        best, arg = segment_max(conv, torch.as_tensor(batch.segment, device=conv.device), 1)
    act = torch.tanh(best[0]).cpu().numpy()
    pos = arg[0].cpu().numpy()
    out = []
    for k in range(len(act)):
        p = int(pos[k])
        word = words[p] if p < len(words) else ""
        window = " ".join(words[max(p - half, 0) : p + half + 1]) if words else ""
        out.append({"neuron": k, "activation": float(act[k]), "position": p, "word": word, "window": window})
    return out
