"""Data-parallel training under torchrun (training/distributed.py): two gloo processes on the
loopback interface follow the one-process loss curve on the same global batch, in-batch negatives
are gathered across the ranks (a control with per-rank negatives drifts off), only rank 0 writes,
and the model ``torchrun -m semsearch train`` saves loads and scores.

One torchrun launch runs every trainer's scenario (this file is its worker script, see the end);
the one-process references run in the pytest process. Tolerance: the two runs add the same
float32 terms in another order (each rank sums its half of the batch, the all-reduce adds the
halves; torchrun also gives each process one thread), about 1e-7 relative per step; over the few
dozen SGD steps at lr 0.5 of a run that grows to 1e-6-1e-5 in the per-epoch losses (measured:
at most 5e-6 relative; the weights within 3e-5). ``RTOL`` = 1e-3 leaves a wide margin, while a
real mistake (per-rank negatives, a wrong normalisation, an unsynchronised sampler) moves the
losses by 1e-2 or more (the control below: by 0.4-1.4, half of it). The tiny runs are short and
tame; on homedepot, CLSM in-batch at batch 256 and lr 0.5 is chaotic enough that any two runs
differing by round-off (one process against itself with weights perturbed by 1e-7 included)
part ways after a few dozen steps, so the invariant tested step by step is the gradient's."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

RTOL = 1e-3  # per-epoch losses, relative (module docstring)
WTOL = 1e-3  # final weights, absolute (weights are O(0.1-1); measured differences are below 1e-5)
# Weights the loss cannot see, left out of the weight comparison: the cross-encoder's hinge is over
# score differences, and its head's bias and the last LayerNorm's bias (times the head's weight)
# shift every score alike, so their true gradient is 0; Adam turns the float noise standing in for
# it into steps of ±lr, different in every run (one process or two).
BLIND = {"bert-rel": ("head.bias", "bert.encoder.layer.1.output.LayerNorm.bias")}

SMALL = {"batch_size": 16, "neg_pool": 32, "epochs": 3, "patience": 10, "lr": 0.5, "seed": 0}
BERT = {"neg_global": 1, "neg_cluster": 0, "lr": 1e-3, "batch_size": 4, "epochs": 2, "patience": 10}
# name -> (kind, parameters); "$bert" is the tiny BERT's folder
SCENARIOS: dict[str, tuple[str, dict[str, Any]]] = {
    "dssm": ("dssm", {"hidden": [32], "out": 8, **SMALL}),  # random negatives from a shared pool
    "dssm-hard": ("dssm", {"hidden": [32], "out": 8, "hard_negatives": 2, "negatives": 2, **SMALL}),
    "dssm-in-batch": ("dssm", {"hidden": [32], "out": 8, "sampling": "in-batch", **SMALL}),
    "clsm-in-batch": ("clsm", {"conv": 16, "out": 8, "window": 3, "sampling": "in-batch", **SMALL}),
    "mt-dnn": (
        "mt-dnn",
        {
            "l2": 16,
            "out": 8,
            "domain_set": "toy",
            "domains": ["food", "hotel"],
            "batch_size": 16,
            "epochs": 2,
            "lr": 0.5,
            "negatives": 4,
            "patience": 10,
        },
    ),
    "knrm": ("knrm", {"dim": 8, "min_count": 1, "epochs": 2, "batch_size": 8, "lr": 0.01, "patience": 10}),
    "s2net": ("s2net", {"dim": 8, "max_terms": 500, "analyzer": "english", "gamma": 5, "epochs": 2, "batch_size": 16}),
    "bert-rep": ("bert-rep", {"base": "$bert", "share_negatives": True, **BERT}),
    "bert-rel": ("bert-rel", {"base": "$bert", **BERT}),
}
CONTROL = "dssm-in-batch"  # run again on two processes with per-rank in-batch negatives


# ------------------------------------------------------------------------------------ the scenarios
def _write_data(root: Path) -> None:
    """The ``tiny`` BEIR set (tests/conftest.py) and a toy query-domain set for MT-DNN."""
    spec = importlib.util.spec_from_file_location(
        "_semsearch_tests_conftest", Path(__file__).parents[1] / "conftest.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.write_tiny_beir(root)
    words = {"food": ["pizza", "dinner", "lunch"], "hotel": ["room", "suite", "night"]}
    lines = ["split\tdialogue_id\tdomains\ttext"]
    for i in range(60):
        dom = "food" if i % 2 else "hotel"
        lines.append(f"{['train', 'train', 'dev'][i % 3]}\td{i}\t{dom}\tplease find {words[dom][i % 3]} {i % 5}")
    (root / "query-domains").mkdir()
    (root / "query-domains" / "toy.tsv").write_text("\n".join(lines) + "\n")


def _write_bert(d: Path) -> None:
    """A 2-layer, 32-wide BERT with the real tokenizer and no dropout (so the two runs compare)."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from semsearch.models.transformer import default_base

    tok = AutoTokenizer.from_pretrained(default_base(), local_files_only=True)
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    BertModel(cfg, add_pooling_layer=False).save_pretrained(str(d))
    tok.save_pretrained(str(d))


def _train(name: str, bert: str, **options: Any) -> tuple[list[float], dict[str, torch.Tensor], dict[str, Any]]:
    """Train scenario ``name`` on the tiny set (dev early stopping included) but one positive pair,
    so that every epoch's last batch splits unevenly over two ranks: per-epoch losses, final
    weights, the log."""
    from semsearch.data import EvalSet, TrainingData, open_dataset
    from semsearch.plugins import create_model
    from semsearch.training import fit, recipe

    kind, raw = SCENARIOS[name]
    kw, args = recipe(kind, {k: bert if v == "$bert" else v for k, v in raw.items()})
    epochs = options.pop("epochs", None)
    if epochs is not None:
        args = args.replace(epochs=epochs)
    m = create_model(kind, **kw)
    ds = open_dataset("tiny")
    data = TrainingData.from_dataset(ds, "train", threshold=2)
    data = dataclasses.replace(data, positives=list(data.positives)[:-1])  # 85: each epoch ends on 5 = 3 + 2 pairs
    log = fit(m, data, EvalSet.judged(ds, "dev"), progress=False, args=args, **options)
    net = m.net if hasattr(m, "net") else None
    state = {k: v.detach().clone() for k, v in net.state_dict().items()} if net is not None else {}
    if kind == "s2net":
        state = {"A": torch.from_numpy(np.asarray(m.A)).clone()}
    losses = [v for e in log["epochs"] for k, v in sorted(e.items()) if k.startswith("loss")]  # MT-DNN: per task
    return losses, state, log


def _gradient_gaps(name: str, steps: int = 6) -> list[float]:
    """Along the two-process trajectory of scenario ``name`` (DSSM/CLSM), at every step: the
    averaged gradient against the one-process gradient of the same global batch at the same
    weights (computed on each rank alone), as max |difference| / max |gradient|. This holds
    where loss curves cannot: on real data at lr 0.5, runs that differ by float round-off part
    ways after some dozens of steps, one process against itself included."""
    from semsearch.data import TrainingData, open_dataset
    from semsearch.plugins import create_model
    from semsearch.training import distributed, recipe
    from semsearch.training.trainer import Pairs, batch_loss, make_optimizer

    kind, raw = SCENARIOS[name]
    kw, args = recipe(kind, raw)
    m = create_model(kind, **kw)
    data = TrainingData.from_dataset(open_dataset("tiny"), "train", threshold=2)
    pairs = Pairs.build(data)
    m.build(m.vocabulary(pairs.train_texts(data)), args.seed)
    net, qf, df = m.net, m.features(pairs.q_texts), m.features(data.doc_texts)
    opt, params = make_optimizer(args, net.parameters()), list(net.parameters())
    rng = np.random.default_rng(0)
    gaps, active = [], distributed.active
    for _ in range(steps):
        rows = rng.permutation(len(pairs.q_rows))[: args.batch_size]
        state = rng.bit_generator.state  # both computations draw the same negatives
        distributed.active = lambda: False
        opt.zero_grad(set_to_none=True)
        batch_loss(net, qf, df, pairs, rows, rng, args).backward()
        one = [p.grad.clone() for p in params]
        distributed.active = active
        rng.bit_generator.state = state
        opt.zero_grad(set_to_none=True)
        batch_loss(net, qf, df, pairs, rows, rng, args).backward()
        distributed.sync_gradients(params)
        gaps.append(max(float((p.grad - g).abs().max() / g.abs().max()) for p, g in zip(params, one)))
        opt.step()
    return gaps


# ------------------------------------------------------------------------------------ the worker
def _worker(out: Path) -> None:
    """One rank of the two-process launch: every scenario, the control, a resumed run, a sampler
    out of step, the checks only a live process group can make; results per rank under ``out``."""
    from safetensors.torch import save_file

    from semsearch.training import distributed, loop

    rank = int(os.environ["RANK"])
    assert distributed.init("cpu") and distributed.world() == 2 and distributed.rank() == rank
    written = out / f"checkpoint-writes.rank{rank}"
    save = loop._save_checkpoint

    def counted(ck, *a):  # type: ignore[no-untyped-def]
        with open(written, "a") as f:
            f.write(f"{ck.path.name}\n")
        save(ck, *a)

    loop._save_checkpoint = counted
    results: dict[str, Any] = {}

    def record(label: str, losses: list[float], state: dict[str, torch.Tensor]) -> None:
        results[label] = losses
        save_file({k: v.contiguous() for k, v in state.items()}, str(out / f"{label}.rank{rank}.safetensors"))

    bert = os.environ["TEST_TINY_BERT"]
    for name in SCENARIOS:
        losses, state, log = _train(name, bert, **({"checkpoint_dir": out / "ck"} if name == "dssm" else {}))
        record(name, losses, state)
        results[f"{name}:best_epoch"] = log.get("best_epoch")
    results["gradient gaps"] = {name: _gradient_gaps(name) for name in ("dssm", "dssm-hard", "clsm-in-batch")}
    # resume: two epochs, then the third from the checkpoint, equals the three-epoch run
    _train("dssm", bert, epochs=2, checkpoint_dir=out / "ck-resume")
    losses, state, _ = _train("dssm", bert, checkpoint_dir=out / "ck-resume", resume=True)
    record("dssm-resumed", losses, state)
    # the negative control: each rank's queries meet only its own half of the batch's documents
    gathered = distributed.batch_documents
    distributed.batch_documents = lambda mine, ids: (mine, ids[distributed.shard(len(ids))], 0)
    losses, state, _ = _train(CONTROL, bert)
    record("per-rank", losses, state)
    distributed.batch_documents = gathered
    # a sampler that parts ways on one rank (here rank 1 draws one number more each step) is caught
    # after the epoch (in-batch: the ranks' collectives keep their sizes; with a random pool the
    # gather of its documents would fail at once, gloo reporting a collective mismatch)
    from semsearch.training import trainer

    step = trainer.batch_loss
    if rank == 1:
        trainer.batch_loss = lambda net, qf, df, pairs, rows, rng, args: (
            rng.random(),
            step(net, qf, df, pairs, rows, rng, args),
        )[1]
    try:
        _train("dssm-in-batch", bert, epochs=1)
        results["desync"] = ""
    except RuntimeError as e:
        results["desync"] = str(e)
    trainer.batch_loss = step
    # uneven slices (an epoch's last, short batch): 5 rows as 3 + 2, gradients back to their owner
    x = torch.arange(6.0).view(3, 2)[: 3 - rank].clone().requires_grad_(True)
    y = distributed.gather(x, 5)
    (y * torch.arange(1.0, 6.0)[:, None]).sum().backward()
    results["gather"] = {"rows": y.detach().tolist(), "grad": x.grad.tolist()}
    # a trainer that does not split its batches is refused
    try:
        net = torch.nn.Linear(2, 1)
        loop.epoch_loop(
            net,
            torch.optim.SGD(net.parameters(), lr=0.1),
            loop.TrainArgs(batch_size=4),
            batches=lambda: [],
            loss=lambda b: net.weight.sum(),
            size=len,
            title="toy",
        )
        results["refused"] = ""
    except ValueError as e:
        results["refused"] = str(e)
    (out / f"results.rank{rank}.json").write_text(json.dumps(results))
    distributed.teardown()
    distributed.exit_process(0)  # as `semsearch train` ends under torchrun


# ------------------------------------------------------------------------------------ launching
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


TORCHRUN_S = 300.0
"""The bound on one launch (tests/waiting.py's WAIT_S; not imported: torchrun runs this file as a
script too, without tests/ on its path)."""


def _torchrun(args: list[str], env: dict[str, str], timeout: float = TORCHRUN_S) -> subprocess.CompletedProcess[str]:
    """Two gloo processes on the loopback interface (torchrun's static rendezvous on 127.0.0.1), in
    a session of their own: a hung launch is killed whole, workers included."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(_free_port()),
        *args,
    ]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"torchrun hung for {timeout} s: {err[-4000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _env(root: Path, **extra: str) -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[2] / "src")  # this checkout's code, whatever is installed
    path = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p)
    # PYTHONFAULTHANDLER: a rank that aborts prints its Python stack (where it died) to the log
    return {
        **os.environ,
        "SEMSEARCH_DATA": str(root),
        "PYTHONPATH": path,
        "SEMSEARCH_PROGRESS": "1",
        "PYTHONFAULTHANDLER": "1",
        **extra,
    }


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> dict[str, Any]:
    """The data, the tiny BERT, the two-process launch's results and the one-process references."""
    from safetensors.torch import load_file

    root = tmp_path_factory.mktemp("data")
    _write_data(root)
    bert = tmp_path_factory.mktemp("bert")
    _write_bert(bert)
    out = tmp_path_factory.mktemp("ddp")
    t0 = time.perf_counter()
    proc = _torchrun([__file__, str(out)], _env(root, TEST_TINY_BERT=str(bert)))
    (out / "stderr.txt").write_text(proc.stderr)  # the whole of both ranks' logs, for a failure
    assert proc.returncode == 0, f"{out / 'stderr.txt'}: {proc.stderr[-4000:]}"
    two_secs = time.perf_counter() - t0
    ranks = [json.loads((out / f"results.rank{r}.json").read_text()) for r in (0, 1)]
    weights = {
        label: [load_file(str(out / f"{label}.rank{r}.safetensors")) for r in (0, 1)]
        for label in [*SCENARIOS, "dssm-resumed", "per-rank"]
    }
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SEMSEARCH_DATA", str(root))
        t0 = time.perf_counter()
        one = {name: _train(name, str(bert)) for name in SCENARIOS}
        one_secs = time.perf_counter() - t0
    print(f"\ntwo processes (launch included) {two_secs:.1f} s; one process {one_secs:.1f} s")
    for name in SCENARIOS:
        gap = _gap(weights[name][0], one[name][1], BLIND.get(name, ()))
        print(
            f"{name:14s} 1 process   {' '.join(f'{x:.6f}' for x in one[name][0])}"
            f"\n{'':14s} 2 processes {' '.join(f'{x:.6f}' for x in ranks[0][name])}  weights within {gap:.1e}"
        )
    print("gradient gaps", {k: f"{max(v):.1e}" for k, v in ranks[0]["gradient gaps"].items()})
    print(
        f"{'control':14s} 2 processes, per-rank in-batch negatives {' '.join(f'{x:.6f}' for x in ranks[0]['per-rank'])}"
    )
    return {"root": root, "bert": bert, "out": out, "ranks": ranks, "weights": weights, "one": one}


def _gap(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], skip: tuple[str, ...] = ()) -> float:
    """The largest absolute difference between two state dicts' weights (``skip``: left out)."""
    assert a.keys() == b.keys()
    return max((float((a[k].float() - b[k].float()).abs().max()) for k in a if k not in skip), default=0.0)


# ------------------------------------------------------------------------------------ the tests
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_two_processes_follow_the_one_process_loss_curve(setup, name):
    one_losses, one_state, one_log = setup["one"][name]
    r0, r1 = setup["ranks"]
    assert len(r0[name]) == len(one_losses) >= 2
    np.testing.assert_allclose(r0[name], one_losses, rtol=RTOL)
    assert r0[name] == r1[name]  # the loss figure is reduced over the ranks: both log the same
    assert r0[f"{name}:best_epoch"] == r1[f"{name}:best_epoch"] == one_log.get("best_epoch")
    w0, w1 = setup["weights"][name]
    assert _gap(w0, w1) == 0.0  # the ranks hold the same weights, bit for bit
    assert _gap(w0, one_state, BLIND.get(name, ())) < WTOL


def test_every_step_averages_to_the_one_process_gradient(setup):
    """At each of 6 steps of the two-process run, the averaged gradient is the one-process one of
    the same global batch at the same weights, up to float32 round-off (measured ~1e-7 of the
    largest entry; on homedepot's CLSM in-batch, batch 256, over a whole epoch: at most 4e-7)."""
    for name, gaps in setup["ranks"][0]["gradient gaps"].items():
        assert len(gaps) == 6 and max(gaps) < 1e-5, (name, gaps)


def test_per_rank_in_batch_negatives_are_caught(setup):
    """The control: without the gather each query meets half the negatives; the loss curve leaves
    the one-process one by far more than the tolerance, so the comparison above can fail."""
    one = np.array(setup["one"][CONTROL][0])
    per_rank = np.array(setup["ranks"][0]["per-rank"])
    assert np.abs(per_rank - one).max() > 100 * RTOL * np.abs(one).max()
    assert per_rank[0] < one[0]  # fewer negatives: an easier softmax, a lower loss


def test_resume_and_checkpoints_written_by_rank_0_only(setup):
    out = setup["out"]
    w_resumed, w_whole = setup["weights"]["dssm-resumed"][0], setup["weights"]["dssm"][0]
    assert _gap(w_resumed, w_whole) < 1e-6
    assert setup["ranks"][0]["dssm-resumed"] == setup["ranks"][0]["dssm"]  # the log carries the first epochs
    assert (out / "checkpoint-writes.rank0").read_text().split() == ["ck"] * 3 + ["ck-resume"] * 3
    assert not (out / "checkpoint-writes.rank1").exists()
    assert json.loads((out / "ck" / "trainer.json").read_text())["epoch"] == 3


def test_gather_uneven_slices_desync_and_refusals(setup, monkeypatch):
    r0, r1 = setup["ranks"]
    rows = [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [0.0, 1.0], [2.0, 3.0]]  # rank 0's 3 rows, then rank 1's 2
    assert r0["gather"]["rows"] == r1["gather"]["rows"] == rows
    # each row's gradient (its weight 1..5) summed over the two ranks' losses, back on its owner
    assert r0["gather"]["grad"] == [[2.0, 2.0], [4.0, 4.0], [6.0, 6.0]]
    assert r1["gather"]["grad"] == [[8.0, 8.0], [10.0, 10.0]]
    assert "does not split its batches" in r0["refused"]
    assert all("the ranks' sampler states differ" in r["desync"] for r in (r0, r1))
    from semsearch.training import distributed

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=r"'batch_size' = 15 is not divisible by the 2 processes"):
        distributed.check_batch(15)
    distributed.check_batch(16)


def test_torchrun_semsearch_train_writes_one_model_that_loads(setup, tmp_path):
    """``torchrun --nproc-per-node 2 -m semsearch train dssm``: progress from rank 0 only, the model
    and the checkpoint written once, by rank 0; the model loads with the normal loader and scores."""
    from semsearch.models import rank
    from semsearch.plugins import load_model

    env = _env(setup["root"])
    train = [
        "-m",
        "semsearch",
        "train",
        "dssm",
        "--data",
        "tiny",
        "--threshold",
        "2",
        "--out",
        str(tmp_path / "m"),
        "--checkpoint",
        str(tmp_path / "ck"),
        "--param",
        "hidden=[32]",
        "--param",
        "out=8",
        "--param",
        "epochs=2",
        "--param",
        "batch_size=16",
        "--param",
        "neg_pool=32",
        "--param",
        "patience=10",
    ]
    proc = _torchrun(train, env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    err = proc.stderr
    assert err.count("dssm epoch 1/2") == 1 and err.count("dssm epoch 2/2") == 1, err
    assert err.count("model saved to") == 1 and "2 processes" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck", "m"]  # no other writer's leftovers
    assert json.loads((tmp_path / "ck" / "trainer.json").read_text())["epoch"] == 2
    log = json.loads((tmp_path / "m" / "training.json").read_text())
    assert [e["epoch"] for e in log["epochs"]] == [1, 2]
    m = load_model(tmp_path / "m")
    m.index(["a", "b", "c"], ["red cat item", "blue dog item", "green tree item"])
    run = rank(m, {"q": "red cat"}, k=3)
    assert len(run["q"]) == 3 and max(run["q"], key=run["q"].get) == "a"


def test_indivisible_batch_or_a_non_loop_kind_is_refused_before_any_data_is_read(monkeypatch, tmp_path):
    """As torchrun's rank 0 sees it (its environment, no process group needed: the refusal comes
    first): exit 2 and a line naming ``batch_size``; kinds off the epoch loop are refused too."""
    from typer.testing import CliRunner

    from semsearch.cli import app

    for k, v in {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "SEMSEARCH_DATA": str(tmp_path / "none")}.items():
        monkeypatch.setenv(k, v)
    out = ["--data", "tiny", "--out", str(tmp_path / "m")]
    r = CliRunner().invoke(app, ["train", "dssm", "--param", "batch_size=15", *out])
    msg = " ".join(r.output.split())
    assert r.exit_code == 2 and "training parameter 'batch_size' = 15 is not divisible by the 2 processes" in msg, msg
    r = CliRunner().invoke(app, ["train", "plsa", *out])
    assert r.exit_code == 2 and "train it without torchrun" in " ".join(r.output.split())
    assert not (tmp_path / "m").exists()


if __name__ == "__main__":  # one rank of the launch in ``setup``
    _worker(Path(sys.argv[1]))
