"""Normalisation, analyzers and letter-trigram hashing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from semsearch.text import Analyzer, TrigramHasher, Vocabulary, count_matrix, normalize, tokenize, word_trigrams


def test_tokenize_follows_the_papers_normalisation():
    assert tokenize("Simpson Strong-Tie 12-Gauge Angle (1.9 cu. ft.)") == [
        "simpson", "strong", "tie", "12", "gauge", "angle", "1", "9", "cu", "ft"]
    assert normalize("  BEHR #SC-141 Tugboat  ") == "behr sc 141 tugboat"
    assert tokenize("") == [] and tokenize("   \t ") == [] and tokenize("!!!") == []
    assert tokenize("Café naïve_ÜBER") == ["café", "naïve", "über"]  # letters of any script, '_' splits


def test_analyzers():
    assert Analyzer.named("paper")("The running dogs") == ["the", "running", "dogs"]
    assert Analyzer.named("english")("The running dogs are in the park") == ["run", "dog", "park"]
    with pytest.raises(ValueError, match="unknown analyzer"):
        Analyzer.named("klingon")
    a = Analyzer.named("english")
    assert Analyzer.from_config(a.config()) == a


def test_vocabulary_and_count_matrix():
    v = Vocabulary.build([["b", "a", "b"], ["c", "b"]], max_size=2)
    assert v.terms == ["b", "a"]  # most frequent first, ties alphabetical, cut at max_size
    assert v.encode(["a", "zzz", "b"]) == [1, 0]
    m = count_matrix([[0, 0, 1], [], [1]], 2)
    assert m.toarray().tolist() == [[2, 1], [0, 0], [0, 1]]
    with pytest.raises(ValueError):
        Vocabulary(["x", "x"])


def test_word_trigrams():
    assert word_trigrams("cat") == ["#ca", "cat", "at#"]
    assert word_trigrams("a") == ["#a#"]


def test_hasher_counts_unknown_trigrams_and_truncation():
    h = TrigramHasher.fit(["deck over", "deck"], max_words=3)
    assert "#de" in h.index and len(h) == len(set(h.trigrams))
    m = h.transform(["deck deck", "zzz", "", "deck over deck over"])
    row0 = dict(zip(m[0].indices, m[0].data))
    assert row0[h.index["dec"]] == 2.0 and sum(row0.values()) == 2 * len(word_trigrams("deck"))
    assert m[1].nnz == 0 and m[2].nnz == 0  # unseen trigrams dropped, empty text -> empty row
    assert m[3].sum() == 2 * len(word_trigrams("deck")) + len(word_trigrams("over"))  # first 3 words only
    assert m.dtype == np.float32


def test_chunked_transform_equals_single_pass():
    texts = [f"item {i} with words {i % 7}" for i in range(50)]
    h = TrigramHasher.fit(texts)
    a, b = h.transform(texts), h.transform(texts, chunk=7)
    assert (a != b).nnz == 0


def test_bags_feed_embedding_bag_like_dense_product():
    texts = ["red brick wall", "brick", "wall wall paint"]
    h = TrigramHasher.fit(texts)
    bags = h.bags(texts)
    emb = torch.nn.EmbeddingBag(len(h), 4, mode="sum")
    got = emb(torch.from_numpy(bags.ids), torch.from_numpy(bags.offsets[:-1]),
              per_sample_weights=torch.from_numpy(bags.weights)).detach().numpy()
    want = h.transform(texts) @ emb.weight.detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert len(bags) == 3


def test_hasher_save_load(tmp_path):
    h = TrigramHasher.fit(["über café", "deck"], max_words=5)
    h.save(tmp_path / "v.json")
    g = TrigramHasher.load(tmp_path / "v.json")
    assert g.trigrams == h.trigrams and g.max_words == 5
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        TrigramHasher.load(tmp_path / "bad.json")


def test_fit_on_empty_texts_is_an_error():
    with pytest.raises(ValueError, match="no trigrams"):
        TrigramHasher.fit(["", "  ", "!!"])
