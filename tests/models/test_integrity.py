"""Integrity on load: a saved model or a bundle whose config, manifest or files disagree (wrong
dimension, wrong model name, a file cut short, files swapped in from another model, a missing,
added or changed file) is refused with a ModelDirError naming the file and the field, and what
was expected against what was found. Tiny fixtures: models built, not trained."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from semsearch.data import Corpus
from semsearch.index import Bundle, build_bundle
from semsearch.models import ModelDirError
from semsearch.plugins import create_model, load_model
from semsearch.text import TrigramHasher

IDS, TEXTS = ["a", "b", "c"], ["red brick wall", "blue door", "brick door"]


def _dssm(seed: int = 0, out: int = 4) -> Any:
    m = create_model("dssm", hidden=[8], out=out)
    m.build(TrigramHasher.fit(TEXTS, max_words=8), seed=seed)
    return m


def _bm25(texts: list[str] = TEXTS) -> Any:
    m = create_model("bm25")
    m.index(IDS, texts)
    return m


def _edit_json(path: Path, edit: Any) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(json.dumps(data), encoding="utf-8")


# ------------------------------------------------------------------------------ saved models
def test_a_sealed_model_loads_and_lists_its_files(tmp_path):
    _dssm().save(tmp_path / "m")
    _bm25().save(tmp_path / "l")
    assert set(json.loads((tmp_path / "m" / "config.json").read_text())["files"]) == {"weights.safetensors"}
    assert set(json.loads((tmp_path / "l" / "config.json").read_text())["files"]) == {"lexical.json", "lexical.npz"}
    assert load_model(tmp_path / "m").name == "dssm" and list(load_model(tmp_path / "l").doc_ids) == IDS


def test_wrong_dimension_in_the_config_names_tensor_and_both_shapes(tmp_path):
    _dssm().save(tmp_path / "m")
    _edit_json(tmp_path / "m" / "config.json", lambda c: c["params"].update(out=6))
    with pytest.raises(
        ModelDirError,
        match=r"weights do not match .*: config\.json gives \(6, 8\), "
        r"weights\.safetensors has \(4, 8\)",
    ):
        load_model(tmp_path / "m")


def test_wrong_model_name_is_refused(tmp_path):
    from semsearch.models.neural import CLSM

    _dssm().save(tmp_path / "m")
    with pytest.raises(ModelDirError, match=r"holds a 'dssm' model, not 'clsm'"):
        CLSM.load(tmp_path / "m")
    _edit_json(tmp_path / "m" / "config.json", lambda c: c.update(model="clsm"))
    with pytest.raises(
        ModelDirError,
        match=r"weights do not match the config's architecture \(.*config\.json gives "
        r".*weights\.safetensors has",
    ):
        load_model(tmp_path / "m")  # a CLSM's towers over a DSSM's weights


def test_truncated_files_are_refused(tmp_path):
    _dssm().save(tmp_path / "m")
    w = tmp_path / "m" / "weights.safetensors"
    w.write_bytes(w.read_bytes()[:-10])
    with pytest.raises(
        ModelDirError,
        match=r"weights\.safetensors: sha256 \w+…, but config\.json "
        r"'files\.weights\.safetensors' says \w+…",
    ):
        load_model(tmp_path / "m")
    # a directory saved before sealing (no 'files'): the readers themselves refuse a cut file
    _edit_json(tmp_path / "m" / "config.json", lambda c: c.pop("files"))
    with pytest.raises(ModelDirError, match="corrupt or incomplete dssm model"):
        load_model(tmp_path / "m")
    _bm25().save(tmp_path / "l")
    _edit_json(tmp_path / "l" / "config.json", lambda c: c.pop("files"))
    npz = tmp_path / "l" / "lexical.npz"
    npz.write_bytes(npz.read_bytes()[: len(npz.read_bytes()) // 2])  # was a bare zipfile.BadZipFile
    with pytest.raises(ModelDirError, match="corrupt or missing lexical index"):
        load_model(tmp_path / "l")


def test_files_swapped_between_two_models_are_refused(tmp_path):
    _dssm(seed=0).save(tmp_path / "m0")
    _dssm(seed=1).save(tmp_path / "m1")  # same architecture, other weights: shapes cannot tell
    shutil.copy(tmp_path / "m1" / "weights.safetensors", tmp_path / "m0" / "weights.safetensors")
    with pytest.raises(ModelDirError, match=r"m0/weights\.safetensors: sha256 .*comes from another model"):
        load_model(tmp_path / "m0")
    _bm25(TEXTS).save(tmp_path / "l0")
    _bm25(["wall", "door", "red"]).save(tmp_path / "l1")
    shutil.copy(tmp_path / "l1" / "config.json", tmp_path / "l0" / "config.json")  # the other's config
    with pytest.raises(ModelDirError, match=r"l0/lexical\.(json|npz): sha256 .*'files\.lexical\.(json|npz)' says"):
        load_model(tmp_path / "l0")


def test_missing_and_changed_files_are_named(tmp_path):
    _bm25().save(tmp_path / "l")
    (tmp_path / "l" / "lexical.npz").unlink()
    with pytest.raises(ModelDirError, match=r"missing file lexical\.npz \(listed in config\.json 'files'\)"):
        load_model(tmp_path / "l")
    _bm25().save(tmp_path / "k")
    meta = tmp_path / "k" / "lexical.json"
    meta.write_text(meta.read_text().replace('"a"', '"z"'))
    with pytest.raises(ModelDirError, match=r"lexical\.json: sha256 .*files\.lexical\.json"):
        load_model(tmp_path / "k")


def test_a_config_files_table_that_escapes_the_directory_is_refused(tmp_path):
    _dssm().save(tmp_path / "m")
    _edit_json(tmp_path / "m" / "config.json", lambda c: c.update(files={"../x": "0" * 64}))
    with pytest.raises(ModelDirError, match=r"config\.json: 'files' names '\.\./x', not a file of this directory"):
        load_model(tmp_path / "m")


def test_saving_again_over_a_training_log_and_a_cache_entry(tmp_path):
    """Files callers write beside a model after saving it (training.json, the cache's recipe.json)
    are not sealed, so saving again into the folder and rewriting them keeps it loadable; a cache
    entry whose model no longer verifies is trained again, not an error."""
    from semsearch.experiments.cache import cached_training

    calls = []

    def train() -> tuple[Any, dict]:
        calls.append(1)
        return _bm25(), {"epochs": len(calls)}

    _, log = cached_training(tmp_path, "bm25", {"x": 1}, train)
    saved = next(tmp_path.iterdir())
    assert set(json.loads((saved / "config.json").read_text())["files"]) == {"lexical.json", "lexical.npz"}
    _, log = cached_training(tmp_path, "bm25", {"x": 1}, train, retrain=True)  # saved over the old entry
    model, log = cached_training(tmp_path, "bm25", {"x": 1}, train)
    assert len(calls) == 2 and log == {"epochs": 2} and list(model.doc_ids) == IDS
    (saved / "lexical.npz").write_bytes(b"cut")
    model, log = cached_training(tmp_path, "bm25", {"x": 1}, train)
    assert len(calls) == 3 and log == {"epochs": 3}
    load_model(saved)


# ------------------------------------------------------------------------------ bundles
@pytest.fixture
def bundles(tmp_path) -> tuple[Path, Path]:
    """Two BM25 + DSSM bundles of the same documents, the DSSMs with different weights."""
    corpus = Corpus(IDS, TEXTS, ["", "", ""])
    return tuple(
        build_bundle(corpus, [create_model("bm25"), _dssm(seed)], tmp_path / f"b{seed}", dataset="t") for seed in (0, 1)
    )  # type: ignore[return-value]


def test_bundle_manifest_that_disagrees_with_its_models(bundles):
    p, _ = bundles
    Bundle.load(p).close()
    man = p / "manifest.json"
    saved = man.read_text()
    cases = [
        (
            lambda m: m["models"][0].update(dim=5),
            r"manifest\.json: 'models\[0\]\.dim' says 5, the dssm encoder in models/dssm embeds in 4 dimensions",
        ),
        (
            lambda m: m["models"][0].update(name="clsm"),
            r"manifest\.json: 'models\[0\]\.name' says 'clsm', but its directory holds a 'dssm' model",
        ),
        (
            lambda m: m["lexical"].update(name="ulm"),
            r"manifest\.json: 'lexical\.name' says 'ulm', but its directory holds a 'bm25' model",
        ),
        (lambda m: m.update(documents=4), r"manifest\.json: 'documents' says 4, documents\.jsonl holds 3"),
        (
            lambda m: m["lexical"].update(path="../b1/lexical"),
            r"manifest\.json: 'lexical\.path' must be a relative path inside the bundle, got '\.\./b1/lexical'",
        ),
        (lambda m: m["models"][0].update(dim="4"), r"manifest\.json: 'models\[0\]\.dim' must be a positive integer"),
        (lambda m: m.pop("files"), r"manifest\.json: 'files' must be a table of file -> sha256, got None"),
    ]
    for edit, message in cases:
        _edit_json(man, edit)
        with pytest.raises(ModelDirError, match=message):
            Bundle.load(p)
        man.write_text(saved)


def test_bundle_files_truncated_missing_added_or_swapped(bundles):
    p, q = bundles
    index = p / "models/dssm/index/index.faiss"
    good = index.read_bytes()
    index.write_bytes(good[:-16])
    with pytest.raises(
        ModelDirError,
        match=r"checksum mismatch for models/dssm/index/index\.faiss: manifest\.json "
        r"'files' says sha256 \w+…, the file has \w+…",
    ):
        Bundle.load(p)
    with pytest.raises(ModelDirError, match="corrupt vector index"):
        Bundle.load(p, verify=False)
    index.write_bytes(good)
    (p / "lexical/lexical.json").rename(p / "lexical.json.bak")
    with pytest.raises(ModelDirError, match=r"missing file lexical/lexical\.json \(listed in manifest\.json 'files'\)"):
        Bundle.load(p)
    (p / "lexical.json.bak").rename(p / "lexical/lexical.json")
    (p / "models/dssm/encoder/extra.bin").write_bytes(b"x")
    with pytest.raises(ModelDirError, match=r"file models/dssm/encoder/extra\.bin is not listed in manifest\.json"):
        Bundle.load(p)
    (p / "models/dssm/encoder/extra.bin").unlink()
    Bundle.load(p).close()
    # the other bundle's encoder weights: the bundle's checksum, and without it the encoder's own
    shutil.copy(q / "models/dssm/encoder/weights.safetensors", p / "models/dssm/encoder/weights.safetensors")
    with pytest.raises(ModelDirError, match=r"checksum mismatch for models/dssm/encoder/weights\.safetensors"):
        Bundle.load(p)
    with pytest.raises(ModelDirError, match=r"encoder/weights\.safetensors: sha256 .*comes from another model"):
        Bundle.load(p, verify=False)
    # the other bundle's whole encoder (config and weights agree): the index's probe check
    shutil.rmtree(p / "models/dssm/encoder")
    shutil.copytree(q / "models/dssm/encoder", p / "models/dssm/encoder")
    with pytest.raises(ModelDirError, match="embeds differently from the one that built this index"):
        Bundle.load(p, verify=False)
