"""Normalisation, analyzers and letter-trigram hashing."""

from __future__ import annotations

import importlib
import random
import sys

import numpy as np
import pytest
import torch

from semsearch.text import (
    Analyzer,
    TrigramHasher,
    Vocabulary,
    WordTable,
    count_matrix,
    hash_words,
    is_cjk,
    normalize,
    tokenize,
    word_trigrams,
)


def test_tokenize_follows_the_papers_normalisation():
    assert tokenize("Simpson Strong-Tie 12-Gauge Angle (1.9 cu. ft.)") == [
        "simpson",
        "strong",
        "tie",
        "12",
        "gauge",
        "angle",
        "1",
        "9",
        "cu",
        "ft",
    ]
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


def test_analyzer_stem_cache_is_bounded(monkeypatch):
    """A served analyzer meets endless new words: its stem cache starts afresh past its bound
    (the stems stay the same)."""
    N = importlib.import_module("semsearch.text.normalize")  # (the package exports a function of that name)

    monkeypatch.setattr(N, "STEM_CACHE_WORDS", 3)
    a = Analyzer.named("english")
    assert a("running dogs jumped") == ["run", "dog", "jump"] and len(a._cache) == 3
    assert a("cats walked") == ["cat", "walk"] and len(a._cache) == 5  # (checked before a text: at most one text over)
    assert a("cats walked") == ["cat", "walk"] and len(a._cache) == 2


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
    got = (
        emb(
            torch.from_numpy(bags.ids),
            torch.from_numpy(bags.offsets[:-1]),
            per_sample_weights=torch.from_numpy(bags.weights),
        )
        .detach()
        .numpy()
    )
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


def _odd_texts(rng: random.Random, n: int) -> list[str]:
    """Generated texts with what a tokenizer can trip on: scripts, final sigma, dotted İ, combining
    marks, digits, punctuation, underscores, the separator character itself, empty and long texts."""
    pieces = [
        "brick",
        "WALL",
        "über",
        "Straße",
        "ΟΔΟΣ",
        "σοφός",
        "İstanbul",
        "ǅemal",
        "e\u0301",
        "ﬁne",
        "٣٤",
        "日本語",
        "🙂",
        "a_b",
        "x-y",
        "2x4",
        "",
        " ",
        "\t\n",
        "ΑΣ.",
        "ﬀ",
        "\x00",
        "Ⅻ",
        "ß",
        "ǈ",
        "Σ",
        "\x01",
        "\x01é",
    ]
    out = ["", "   ", "brick " * 100, "a a a a a a a a a a", "\x00", "\x00brick\x00"]
    for _ in range(n):
        out.append(
            "".join(rng.choice(pieces) + rng.choice([" ", "", ",", " ", "  "]) for _ in range(rng.randint(0, 20)))
        )
    return out


@pytest.mark.parametrize("with_sep", [False, True])
def test_vectorised_encode_equals_text_by_text(with_sep):
    rng = random.Random(7)
    texts = _odd_texts(rng, 300)
    if not with_sep:
        texts = [t.replace("\x00", "") for t in texts]
    h = TrigramHasher.fit(texts[::2], max_words=8)
    fast, slow = WordTable(h), WordTable(h)
    for part in (texts[:100], texts[100:], texts):  # new words, then a warm table
        a, b = fast.encode(part, chunk=37), slow.encode_each(part)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
        assert fast.ids == slow.ids and len(fast) == len(slow)
    # and both are the papers' tokens (CJK runs one word per character, ``hash_words``), truncated to max_words
    ptr, ids = fast.encode(texts)
    words = {i: w for w, i in fast.ids.items()}
    for k, t in enumerate(texts):
        assert [words[i] for i in ids[ptr[k] : ptr[k + 1]]] == hash_words(t)[:8]
        if not is_cjk(t):
            assert hash_words(t) == tokenize(t)


def test_features_equal_on_real_titles():
    """DSSM's input of real-looking titles — each title's trigram bag (``text_bags``) and a batch
    of them by distinct words (``WordBagFeatures``) — equals the text-by-text path's and the
    dense count matrix."""
    from semsearch.models.neural import WordBagFeatures

    titles = [
        "DEWALT 20-Volt MAX Lithium-Ion Cordless Drill/Driver Kit",
        "Hampton Bay 52 in. Ceiling Fan",
        "1/2 in. x 10 ft. Copper Pipe",
        "",
        "RIDGID 6 Gal. Wet/Dry Vac",
        "Behr Premium Plus 1-gal. #W-D-610",
        "Café Nöir Ø 30 cm — Ölfarbe",
        "Husky 3/8 in. Drive SAE Socket Set (40-Piece)",
    ] * 5
    h = TrigramHasher.fit(titles, max_words=64)
    indptr, ids = h.table.text_bags(titles)
    ptr, words = WordTable(h).encode_each(titles)
    bags = WordTable(h)
    bags.encode_each(titles)
    ref = bags.bags(words)
    assert np.array_equal(indptr, ref.offsets[ptr]) and np.array_equal(ids, ref.ids)
    dense = h.transform(titles).toarray()
    batch = WordBagFeatures(h.table, titles).batch(np.arange(len(titles)))
    w = batch.words
    for i in range(len(titles)):
        assert np.array_equal(np.bincount(ids[indptr[i] : indptr[i + 1]], minlength=len(h)), dense[i])
        mine = [w.ids[w.offsets[p] : w.offsets[p + 1]] for p in batch.positions[batch.indptr[i] : batch.indptr[i + 1]]]
        assert np.array_equal(np.bincount(np.concatenate([np.zeros(0, np.int64), *mine]), minlength=len(h)), dense[i])


@pytest.mark.parametrize("budget", [10**9, 400, 40])
def test_text_cache_gives_the_same_word_ids(monkeypatch, budget):
    """Texts met before come from the cache (and a full cache starts afresh): the same rows as
    tokenising each text, whatever mix of old and new texts a call holds."""
    from semsearch.text import trigram

    monkeypatch.setattr(trigram, "TEXT_CACHE_CHARS", budget)
    rng = random.Random(3)
    texts = _odd_texts(rng, 120)
    h = TrigramHasher.fit(texts, max_words=8)
    table, ref = WordTable(h), WordTable(h)
    calls = [texts[:50], texts[:50], texts[30:90], texts[::-1], texts[5:6], [], texts + texts]
    for part in calls:
        a, b = table.encode(part), ref.encode_each(part)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert table._chars <= budget


def test_encode_from_many_threads_gives_each_text_its_own_words():
    """A server encodes queries from many threads: every call still gets its texts' words."""
    from concurrent.futures import ThreadPoolExecutor

    rng = random.Random(11)
    texts = [f"w{rng.randint(0, 300)} x{i} y{rng.randint(0, 50)} " * rng.randint(1, 3) for i in range(3000)]
    h = TrigramHasher.fit(texts[:100], max_words=8)
    table = WordTable(h)

    def words(k: int) -> bool:
        part = texts[k * 30 : (k + 1) * 30]
        ptr, ids = table.encode(part)
        with table._lock:  # other threads add words meanwhile: read the table as encode leaves it
            names = {i: w for w, i in table.ids.items()}
        return all([names[i] for i in ids[ptr[r] : ptr[r + 1]]] == tokenize(t)[:8] for r, t in enumerate(part))

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: races show
    try:
        with ThreadPoolExecutor(8) as ex:
            assert all(ex.map(words, list(range(100)) * 2))
    finally:
        sys.setswitchinterval(old)


def _many_words(rng: random.Random, n: int) -> list[str]:
    """Texts over a few thousand distinct words: ASCII, accented, 2-, 3- and 4-byte letters."""
    letters = "abcxyz019" + "éßøΣσЖж" + "日本語한" + "\U0001d518\U0001d52b\U0001d526"  # 𝔘𝔫𝔦: 4 bytes each
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(1, 9))) for _ in range(3000)]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(0, 12))) for _ in range(n)]


def test_compiled_word_trigrams_equal_word_ids():
    """The compiled tokeniser's words get ``TrigramHasher.word_ids`` as their trigrams, for words of
    1- to 4-byte characters (trigrams of up to 12 bytes) and a vocabulary missing some."""
    rng = random.Random(5)
    texts = _many_words(rng, 400)
    h = TrigramHasher.fit(texts[:50], max_words=10)
    table = WordTable(h)
    table.encode(texts, chunk=90)
    assert len(table) > 900  # (the words' CJK runs hashed a word per character: fewer, shorter words)
    ptr = np.frombuffer(table._ptr, dtype=np.int64)
    tri = np.frombuffer(table._tri, dtype=np.int64)
    for w, i in table.ids.items():
        assert tuple(tri[ptr[i] : ptr[i + 1]]) == h.word_ids(w), w


def test_compiled_tokeniser_after_text_by_text_words():
    """Words added text by text (``encode_each``) and by the compiled path mix: the same ids as
    text-by-text alone, through hash-table growth (thousands of words from a 512-word start)."""
    rng = random.Random(9)
    texts = _many_words(rng, 600) + _odd_texts(rng, 100)
    h = TrigramHasher.fit(texts[::3], max_words=5)
    mixed, ref = WordTable(h), WordTable(h)
    for k, start in enumerate(range(0, len(texts), 70)):
        part = texts[start : start + 70]
        a = mixed.encode_each(part) if k % 3 == 1 else mixed.encode(part, chunk=25)
        b = ref.encode_each(part)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert mixed.ids == ref.ids and list(mixed._tri) == list(ref._tri)


def test_text_bags_equal_word_bags():
    """``text_bags``: each text's word bags laid end to end, as ``bags(encode(texts))``."""
    rng = random.Random(13)
    texts = _odd_texts(rng, 200) + ["", "brick " * 100, "🙂🙂", "Ⅻ ǅemal"]
    h = TrigramHasher.fit(texts[::2], max_words=7)
    table, ref = WordTable(h), WordTable(h)
    indptr, ids = table.text_bags(texts)
    word_ptr, words = ref.encode_each(texts)
    bags = ref.bags(words)
    assert np.array_equal(indptr, bags.offsets[word_ptr]) and np.array_equal(ids, bags.ids)
    assert ids.dtype == np.int64 and indptr.dtype == np.int64


@pytest.mark.parametrize("n_texts", [3, 300])  # few texts (np.unique) and many (a pass over the table)
def test_word_bags_are_the_texts_words_once_each(n_texts):
    """``word_bags``: every text's words as positions among the distinct words, whose bags are
    ``bags`` of those words; laid out again per text they give ``text_bags``."""
    rng = random.Random(5)
    texts = (_odd_texts(rng, 300) + ["", "brick " * 100, "🙂🙂", "Ⅻ ǅemal"])[-n_texts:]
    h = TrigramHasher.fit(_odd_texts(random.Random(6), 300), max_words=7)
    table, ref = WordTable(h), WordTable(h)
    table.encode(_odd_texts(random.Random(7), 400))  # words met before, not all in these texts
    indptr, positions, bags = table.word_bags(texts)
    word_ptr, words = ref.encode_each(texts)
    assert np.array_equal(indptr, word_ptr) and positions.dtype == np.int64
    distinct = np.array([table.ids[w] for w in (ref._words[i] for i in words)])
    assert len(bags) == len(set(distinct.tolist())) and len(set(positions.tolist())) == len(bags)
    again = table.bags(np.unique(distinct))  # the distinct words, in id order
    assert np.array_equal(bags.ids, again.ids) and np.array_equal(bags.offsets, again.offsets)
    assert np.array_equal(np.unique(distinct)[positions], distinct)
    _, ids = table.text_bags(texts)
    laid = [bags.ids[bags.offsets[p] : bags.offsets[p + 1]] for p in positions]
    assert np.array_equal(np.concatenate(laid) if laid else np.zeros(0, np.int64), ids)


def test_vocabulary_with_a_lone_surrogate_is_harmless():
    """A loaded vocabulary may hold any string; one that is not UTF-8 (a lone surrogate) just
    never matches."""
    h = TrigramHasher(["#ab", "ab#", "\ud800ab", "a\ud800\udc00"], max_words=4)
    ptr, ids = WordTable(h).text_bags(["ab AB", "x"])
    assert ptr.tolist() == [0, 4, 4] and ids.tolist() == [0, 1, 0, 1]


def test_more_new_words_than_the_first_pass_has_room_for():
    """A chunk with more new words than ``lookup_tokens`` is given room for (4,096 at first): the
    rest go through ``add_words``, still numbered in order of appearance."""
    rng = random.Random(17)
    words = [f"w{i}" if i % 3 else f"ö{i}x" for i in range(9000)]
    rng.shuffle(words)
    texts = [" ".join(words[i : i + 7] + words[i : i + 2]) for i in range(0, len(words), 5)]
    h = TrigramHasher.fit(texts[:40], max_words=8)
    fast, slow = WordTable(h), WordTable(h)
    a, b = fast.encode(texts), slow.encode_each(texts)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert fast.ids == slow.ids and list(fast._tri) == list(slow._tri) and len(fast) > 8000


@pytest.mark.parametrize("threads", [1, 2])
def test_many_texts_are_looked_up_on_every_thread_as_in_one_pass(monkeypatch, threads):
    """From ``PARALLEL_TEXTS`` texts on, a table with words in it looks them up in slices at once
    (``_lookup_split``), leaving new words to ``add_words``: the ids, and the new words' numbers
    in order of appearance, equal the text-by-text reference; a fresh table takes the one pass."""
    import torch

    from semsearch.text import trigram

    monkeypatch.setattr(trigram, "PARALLEL_TEXTS", 200)
    rng = random.Random(5)
    vocab = [f"w{i}" for i in range(600)] + [f"é{i}" for i in range(50)]
    texts = [" ".join(rng.choice(vocab) for _ in range(rng.randrange(0, 12))) for _ in range(1500)]
    texts += _odd_texts(rng, 200)
    h = TrigramHasher.fit(texts[:30], max_words=8)
    fast, slow = WordTable(h), WordTable(h)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        split = fast._lookup_split
        for i, chunk in enumerate((texts[:300], texts[300:], texts)):  # known words, then new ones among them
            calls: list[int] = []
            monkeypatch.setattr(fast, "_lookup_split", lambda *a, calls=calls: calls.append(1) or split(*a))
            a, b = fast.encode(chunk), slow.encode_each(chunk)
            assert calls == ([1] if i else []), "the first chunk meets a fresh table: one pass"
            assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
            assert fast.ids == slow.ids and list(fast._tri) == list(slow._tri)
            fast.forget_texts()
    finally:
        torch.set_num_threads(old)


@pytest.mark.parametrize("touched_only", [False, True])
def test_bags_columns_are_the_csc_transpose(touched_only):
    """``Bags.columns`` (one compiled counting sort) holds what scipy's ``csr -> csc`` does: per
    column the bags holding it, ascending, repeats kept with their weights; empty bags and
    untouched columns included."""
    from semsearch.text import Bags

    rng = np.random.default_rng(int(touched_only))
    sizes = rng.integers(0, 6, 40)
    sizes[[3, 17]] = 0  # empty bags
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    ids = rng.integers(0, 12, offsets[-1]).astype(np.int64)  # repeats within a bag too
    ids[ids == 7] = 8  # column 7 untouched
    b = Bags(ids, rng.random(offsets[-1]).astype(np.float32), offsets)
    rows, weights, starts, touched = b.columns(15, touched_only)
    m = b.csr(15).tocsc()
    assert np.array_equal(rows, m.indices) and np.array_equal(weights, m.data) and weights.dtype == np.float32
    if touched_only:
        assert np.array_equal(touched, np.flatnonzero(np.diff(m.indptr))) and 7 not in touched
        assert np.array_equal(starts, m.indptr[touched])
    else:
        assert len(touched) == 0 and np.array_equal(starts, m.indptr[:-1])
    assert all(a.dtype == np.int64 for a in (rows, starts, touched))
