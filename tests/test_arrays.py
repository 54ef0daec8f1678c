import numpy as np

from semsearch.arrays import runs


def test_runs_number_each_entry_by_run_and_offset():
    run, within = runs(np.array([2, 0, 3]))
    assert run.tolist() == [0, 0, 2, 2, 2] and within.tolist() == [0, 1, 0, 1, 2]
    run, within = runs(np.zeros(0, dtype=np.int64))
    assert run.shape == within.shape == (0,)
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 5, 50)
    run, within = runs(lengths)
    want = [(i, j) for i, n in enumerate(lengths) for j in range(n)]  # the loop it replaces
    assert list(zip(run.tolist(), within.tolist())) == want
