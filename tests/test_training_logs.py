"""Reading a run's TensorBoard scalars back (apo_lightning.eval.training_logs)."""

import pytest
from torch.utils.tensorboard import SummaryWriter

from apo_lightning.eval.training_logs import read_scalars, sixths


def test_read_scalars_merges_every_version_of_a_run_in_step_order(tmp_path):
    first = SummaryWriter(tmp_path / "run" / "version_0")
    for step in (2, 0, 1):  # logged out of order: read back sorted
        first.add_scalar("train/kl", float(step), step)
    first.add_scalar("val/success_rate", 0.5, 1)
    first.close()
    resumed = SummaryWriter(tmp_path / "run" / "version_1")
    for step in (3, 4):
        resumed.add_scalar("train/kl", 10.0 * step, step)
    resumed.close()

    run = read_scalars(tmp_path / "run")
    assert run["train/kl"] == [(0, 0.0), (1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0)]
    assert run["val/success_rate"] == [(1, 0.5)]
    assert read_scalars(tmp_path / "run" / "version_1") == {"train/kl": [(3, 30.0), (4, 40.0)]}
    assert read_scalars(tmp_path / "empty") == {}


def test_sixths_takes_a_sixth_from_each_end_and_at_least_one_value():
    assert sixths(list(range(12))) == ([0, 1], [10, 11])
    assert sixths(list(range(17))) == ([0, 1], [15, 16])
    assert sixths([3, 4]) == ([3], [4])
    with pytest.raises(ValueError, match="empty"):
        sixths([])
