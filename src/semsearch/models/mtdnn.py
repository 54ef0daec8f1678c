"""MT-DNN (Liu et al. 2015): one letter-trigram network for query classification and ranking.

§2.1, Figure 1: a text's letter-trigram bag l1 → the shared semantic layer l2 (300, tanh) → per
task a 300 → 128 tanh layer l3; a classification domain C then has a logistic output
P(C|Q) = σ(W3ᶜ · l3) (Eq. 3), and the ranking task maps the query and the document through their
own l3 layers (Sq, Sd) and scores them by cosine (Eq. 4). ``share = "query"`` is the alternative of
Figure 3: only the query side is shared; documents get a trigram → 300 → 128 tower of their own.
Training (Algorithm 1, one task per minibatch) lives in ``training/mtdnn.py``.

With ``ranking = false`` and one domain the same network is the single-task classification DNN
of Table 2; with domains empty it is a one-hidden-layer DSSM."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from ..text import Bags
from .hparams import MTDNNParams
from .neural import DSSM, DSSMTower, NeuralEncoder, glorot

# the paper's Restaurant, Hotel, Flight and Nightlife domains, as the SGD file names them


class MTDNNNet(nn.Module):
    """Shared l2 layer, one l3 + logistic head per domain, and the ranking task's Sq/Sd layers."""

    def __init__(self, vocab: int, l2: int, out: int, n_domains: int, ranking: bool, share: str, gen: torch.Generator):
        """The shared layer and each task's layers, initialised from ``gen``.

        Args:
            vocab: trigram vocabulary size.
            l2: units of the shared semantic layer.
            out: units of each task's output layer.
            n_domains: classification tasks.
            ranking: whether the net has the ranking task.
            share: "all" (Figure 1) or "query" (Figure 3: titles get their own tower).
            gen: the initialisation's random generator."""
        super().__init__()
        self.shared = DSSMTower(vocab, [], l2, gen)  # l2 = tanh(W1 · l1), Eq. 1
        self.cls_l3 = nn.ModuleList(nn.Linear(l2, out) for _ in range(n_domains))  # W2ᵗ, Eq. 2
        self.cls_out = nn.ModuleList(nn.Linear(out, 1) for _ in range(n_domains))  # W3ᵗ, Eq. 3
        for layer in [*self.cls_l3, *self.cls_out]:
            glorot(layer.weight, layer.in_features, layer.out_features, gen)
            nn.init.zeros_(layer.bias)
        self.ranking, self.share = ranking, share
        if ranking:
            self.sq = nn.Linear(l2, out)
            glorot(self.sq.weight, l2, out, gen)
            nn.init.zeros_(self.sq.bias)
            if share == "all":
                self.sd = nn.Linear(l2, out)
                glorot(self.sd.weight, l2, out, gen)
                nn.init.zeros_(self.sd.bias)
            else:
                self.doc_tower = DSSMTower(vocab, [l2], out, gen)

    def l2(self, x: Bags) -> torch.Tensor:
        """The shared semantic representation (Eq. 1)."""
        return self.shared(x)

    def logits(self, x: Bags, domain: int) -> torch.Tensor:
        """(n,) logits of domain ``domain`` (index into the model's domains); σ gives P(C|Q)."""
        return self.cls_out[domain](torch.tanh(self.cls_l3[domain](self.l2(x))))[:, 0]

    def all_logits(self, x: Bags) -> torch.Tensor:
        """(n, domains) logits, the shared layer computed once."""
        h = self.l2(x)
        return torch.cat([o(torch.tanh(layer(h))) for layer, o in zip(self.cls_l3, self.cls_out)], dim=1)

    def query(self, x: Bags) -> torch.Tensor:
        """Q^{Sq}: the ranking task's query representation."""
        self.require_ranking()
        return torch.tanh(self.sq(self.l2(x)))

    def doc(self, x: Bags) -> torch.Tensor:
        """D^{Sd}: through the shared l2 (Figure 1) or the document's own tower (Figure 3)."""
        self.require_ranking()
        if self.share == "all":
            return torch.tanh(self.sd(self.l2(x)))
        return self.doc_tower(x)

    def require_ranking(self) -> None:
        if not self.ranking:
            raise ValueError("this MT-DNN was built without the ranking task; it only classifies")


class MTDNN(DSSM):
    """Multi-task DNN: ranks like DSSM (cosine of the Sq/Sd outputs) and classifies queries into
    ``domains`` (one logistic head each). ``domain_set`` names the query-domain file the
    classification tasks come from (``query-domains/NAME.tsv`` under the data root, or a path).
    Its input (letter-trigram bags) and output size are DSSM's; ``build`` makes the multi-task net."""

    name = "mt-dnn"
    Params = MTDNNParams  # type: ignore[assignment]  # its own params
    p: MTDNNParams  # type: ignore[assignment]  # its own params

    # its towers share a first layer and sit behind per-task heads (MTDNNNet), not DSSM's two
    # ``DSSMTower``s, so it encodes through the trigram bags of each text
    _encode = NeuralEncoder._encode  # noqa: SLF001  # a base class's method, DSSM's override skipped

    def build(self, hasher, seed: int = 0) -> None:
        p = self.p
        self.hasher = hasher
        self.net = MTDNNNet(
            len(hasher), p.l2, p.out, len(p.domains), p.ranking, p.share, torch.Generator().manual_seed(seed)
        )  # type: ignore[assignment]  # its own net

    @property
    def domains(self) -> list[str]:
        return list(self.p.domains)

    def classify(self, texts: Sequence[str]) -> np.ndarray:
        """(n, domains) probabilities P(C|Q) (Eq. 3), columns in ``domains`` order."""
        if not self.p.domains:
            raise ValueError("this MT-DNN has no classification domains")
        for t in texts:
            if not t.strip():
                raise ValueError("cannot classify an empty query")
        out = self._batched(texts, lambda net, x: torch.sigmoid(net.all_logits(x)))
        return np.zeros((0, len(self.domains)), np.float32) if out is None else out.cpu().numpy()

    def semantic(self, texts: Sequence[str]) -> np.ndarray:
        """(n, l2) shared semantic representation: the features of the domain-adaptation study."""
        out = self._batched(texts, lambda net, x: net.l2(x))
        return np.zeros((0, self.p.l2), np.float32) if out is None else out.cpu().numpy()

    def index(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        self._require().require_ranking()
        super().index(doc_ids, texts)
