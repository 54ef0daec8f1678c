"""The spine: typed parameters, the registry, the one epoch loop and its early-stopping rule, the
progress lines a log shows, and the device setting."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pytest
import torch

from semsearch import plugins
from semsearch.device import resolve_device
from semsearch.params import ParamError, Params, param, split
from semsearch.training.args import TrainArgs
from semsearch.training.loop import Checkpoint, EarlyStopping, em_loop, epoch_loop, lr_factor


@dataclass(frozen=True)
class Toy(Params):
    kind = "toy"
    k: int = param(3, ge=1)
    rate: float = param(0.5, gt=0, le=1)
    mode: Literal["a", "b"] = "a"
    grid: float | list[float] = 1.0
    cap: int | None = None


def test_params_coerce_and_name_what_is_wrong():
    p = Toy.from_mapping({"k": 4.0, "rate": 1, "grid": [1, 2]})
    assert (p.k, p.rate, p.grid) == (4, 1.0, [1.0, 2.0]) and isinstance(p.k, int)
    with pytest.raises(ParamError, match=r"--param: toy has no parameter 'rte' \(did you mean 'rate'\?\)"):
        Toy.from_mapping({"rte": 0.1}, where="--param")
    with pytest.raises(ParamError, match="toy parameter 'k' must be a whole number, got 'many'"):
        Toy.from_mapping({"k": "many"})
    with pytest.raises(ParamError, match="toy parameter 'k' must be >= 1, got 0"):
        Toy(k=0)
    with pytest.raises(ParamError, match="must be one of 'a', 'b'"):
        Toy(mode="c")  # type: ignore[arg-type]
    with pytest.raises(ParamError, match="must be true or false|whole number"):
        Toy(k=True)
    assert Toy.from_mapping(Toy(cap=5).as_dict()) == Toy(cap=5)


def test_split_spreads_one_vocabulary_over_model_and_training():
    toy, train = split({"k": 2, "epochs": 3, "lr": 0.1}, Toy, TrainArgs)
    assert toy.k == 2 and (train.epochs, train.lr) == (3, 0.1)
    with pytest.raises(ParamError, match="has no parameter 'epoch' \\(did you mean 'epochs'\\?\\)"):
        split({"epoch": 3}, Toy, TrainArgs)
    with pytest.raises(ParamError, match="device"):
        TrainArgs(device="tpu")


def test_registry_knows_every_kind_and_families():
    for kind in plugins.model_names():
        assert plugins.model_class(kind).name == kind
    assert plugins.family("lambdamart") == "ranker" and plugins.family("bm25") == "lexical"
    with pytest.raises(ValueError, match="unknown model 'bm26'"):
        plugins.create_model("bm26")


def test_early_stopping_rule():
    stop = EarlyStopping(patience=2, min_delta=0.01)
    assert stop.record({"epoch": 1, "dev": 0.50})
    assert not stop.record({"epoch": 2, "dev": 0.505})  # within min_delta: not better
    assert not stop.should_stop
    assert not stop.record({"epoch": 3, "dev": 0.40})
    assert stop.should_stop and stop.best_epoch == 1 and stop.best_dev == 0.50


class _Line(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))


def _fit(epochs: int, dev_scores: list[float], tmp_path=None, resume=False, **kw):
    net = _Line()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    args = TrainArgs(epochs=epochs, batch_size=2, lr=0.1, patience=2, **kw)
    scores = iter(dev_scores)
    ck = Checkpoint(tmp_path, None, resume) if tmp_path is not None else None
    log = epoch_loop(
        net,
        opt,
        args,
        batches=lambda: [np.arange(2)] * 3,
        loss=lambda b: (net.w - 1.0).pow(2).sum(),
        size=len,
        dev=lambda: {"dev": next(scores)},
        title="toy",
        checkpoint=ck,
        rng=np.random.default_rng(0),
        n_batches=lambda: 3,
    )
    return net, log


def test_epoch_loop_keeps_the_best_epoch_and_stops():
    net, log = _fit(6, [0.1, 0.3, 0.2, 0.25, 0.9, 0.9])
    assert [e["epoch"] for e in log["epochs"]] == [1, 2, 3, 4]  # two epochs without a better dev score
    assert log["best_epoch"] == 2 and log["stopped"].startswith("no ndcg@10 improvement")
    best, _ = _fit(2, [0.1, 0.3])
    assert torch.equal(net.w, best.w)  # the weights of epoch 2 were restored


def test_epoch_loop_resumes_exactly(tmp_path):
    whole, _ = _fit(4, [0.1, 0.2, 0.3, 0.4])
    _fit(2, [0.1, 0.2], tmp_path)  # stopped after two epochs, checkpointed
    resumed, log = _fit(4, [0.3, 0.4], tmp_path, resume=True)
    assert [e["epoch"] for e in log["epochs"]] == [1, 2, 3, 4] and torch.equal(whole.w, resumed.w)


def test_linear_schedule_warms_up_then_falls_to_zero_over_all_steps(tmp_path):
    """``lr_schedule = "linear"``: each step's rate is the configured one (every parameter group's
    own) times ``lr_factor``, counted over all epochs' steps; a resumed run continues the schedule
    where it stopped; constant leaves the rates alone; warmup without the linear schedule is refused."""
    assert [lr_factor("linear", s, 10, 0.2) for s in range(10)] == [
        0.5,
        1.0,
        1.0,
        0.875,
        0.75,
        0.625,
        0.5,
        0.375,
        0.25,
        0.125,
    ]
    assert [lr_factor("linear", s, 4) for s in range(4)] == [1.0, 0.75, 0.5, 0.25]
    assert lr_factor("constant", 7, 10, 0.0) == 1.0

    def fit(epochs, ck=None, resume=False, fail_at=None, **kw):
        net = _Line()
        net.v = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([{"params": [net.w]}, {"params": [net.v], "lr": 1.0}], lr=0.1)
        seen = []

        def loss(b):
            if len(seen) == fail_at:
                raise KeyboardInterrupt  # the run is stopped here; the last epoch's checkpoint stays
            seen.append([g["lr"] for g in opt.param_groups])  # the loop sets the rate before the step
            return (net.w - 1.0).pow(2).sum() + (net.v + 1.0).pow(2).sum()

        args = TrainArgs(epochs=epochs, batch_size=2, lr=0.1, patience=9, **kw)
        epoch_loop(
            net,
            opt,
            args,
            batches=lambda: [np.arange(2)] * 3,
            loss=loss,
            size=len,
            dev=lambda: {"dev": 0.0},
            title="toy",
            checkpoint=Checkpoint(ck, None, resume) if ck else None,
            rng=np.random.default_rng(0),
            n_batches=lambda: 3,
            progress=False,
        )
        return net, seen

    whole, seen = fit(2, lr_schedule="linear", warmup=0.34)  # 6 steps, 2 of warm-up
    want = [lr_factor("linear", s, 6, 0.34) for s in range(6)]
    assert want == [0.5, 1.0, 1.0, 0.75, 0.5, 0.25]
    assert np.allclose(seen, [[0.1 * f, 1.0 * f] for f in want])
    _, flat = fit(2)
    assert flat == [[0.1, 1.0]] * 6
    with pytest.raises(KeyboardInterrupt):  # stopped in epoch 2, then resumed: the schedule goes on
        fit(2, tmp_path, fail_at=4, lr_schedule="linear", warmup=0.34)
    resumed, later = fit(2, tmp_path, resume=True, lr_schedule="linear", warmup=0.34)
    assert np.allclose(later, [[0.1 * f, 1.0 * f] for f in want[3:]]) and torch.equal(whole.w, resumed.w)
    # the same where the checkpoint's last step ran below the configured rate (no warm-up: 1, 5/6,
    # 4/6 in epoch 1): the resumed run scales the configured rates, not the checkpoint's
    ck2 = tmp_path / "falling"
    whole, seen = fit(2, lr_schedule="linear")
    want = [lr_factor("linear", s, 6) for s in range(6)]
    assert np.allclose(seen, [[0.1 * f, 1.0 * f] for f in want]) and want[2] < 1.0
    with pytest.raises(KeyboardInterrupt):
        fit(2, ck2, fail_at=4, lr_schedule="linear")
    resumed, later = fit(2, ck2, resume=True, lr_schedule="linear")
    assert np.allclose(later, [[0.1 * f, 1.0 * f] for f in want[3:]]) and torch.equal(whole.w, resumed.w)
    with pytest.raises(ParamError, match="warmup.*lr_schedule"):
        TrainArgs(warmup=0.1).check()
    with pytest.raises(ParamError, match="must be one of 'constant', 'linear'"):
        TrainArgs(lr_schedule="cosine")  # type: ignore[arg-type]


def test_progress_lines_in_a_log(capsys, monkeypatch):
    monkeypatch.delenv("SEMSEARCH_PROGRESS", raising=False)  # pytest's stderr is not a terminal
    _fit(2, [0.1, 0.2])
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "toy epoch 1/2" in err[0] and "loss" in err[0] and "dev ndcg@10 0.1000" in err[0]
    assert "ETA" in err[0] and "toy epoch 2/2" in err[1]
    em_loop(lambda i: {"loglik": -10.0 / (i + 1)}, 3, title="toy EM")
    monkeypatch.setenv("SEMSEARCH_PROGRESS", "0")
    _fit(2, [0.1, 0.2])
    assert capsys.readouterr().err == ""


def test_em_loop_stops_by_relative_tolerance():
    log = em_loop(lambda i: {"loglik": -100.0 + (1.0 if i == 0 else 1.00001)}, 10, tol=1e-3, progress=False)
    assert len(log["iterations"]) == 2 and "changed by less than" in log["stopped"]


def test_device_auto_is_cpu_without_a_gpu():
    if not torch.cuda.is_available():
        assert resolve_device("auto").type == "cpu"
        with pytest.raises(ValueError, match="no CUDA GPU"):
            resolve_device("cuda")
