"""The DLM's p̂ comes with its path in R: the estimate at R/4, R/2 and R, and which records have not settled."""

import numpy as np

from lmaudit.probes.trajectories import TrajectoryResult
from lmaudit.runs.extract import _columns, convergence


def test_estimate_at_fractions_of_r_and_the_unconverged_records():
    settled = TrajectoryResult(np.log(np.full(32, 0.2)), forwards=32)
    # one rare lucky trajectory in the second half: p̂ jumps from 0.001 to ≈ 0.03 between R/2 and R
    lucky = TrajectoryResult(np.log(np.r_[np.full(16, 1e-3), np.full(15, 1e-3), [0.9]]), forwards=32)
    col = _columns([settled, lucky], steps=np.array([5, 5]))
    np.testing.assert_allclose(col["log_p_hat_half"], [np.log(0.2), np.log(1e-3)])
    np.testing.assert_allclose(col["log_p_hat_quarter"], [np.log(0.2), np.log(1e-3)])
    np.testing.assert_allclose(col["log_p_hat"][1], np.log((31e-3 + 0.9) / 32))
    conv = convergence(col)
    assert conv["not_converged_fraction"] == 0.5  # the lucky record moved by ≈ 3.4 nats > log 2
    assert conv["median_abs_change_quarter_to_half"] == 0.0
    np.testing.assert_allclose(conv["median_abs_change_half_to_full"], np.log((31e-3 + 0.9) / 32 / 1e-3) / 2)
    single = TrajectoryResult(np.array([-3.0]), forwards=1)  # a deterministic order: one trajectory, nothing to move
    assert _columns([single], steps=np.array([1]))["log_p_hat_half"][0] == -3.0


def test_convergence_cannot_be_checked_where_every_p_hat_is_zero():
    zero = TrajectoryResult(np.full(8, -np.inf), forwards=8)  # every order misses: p̂ = 0 at R/4, R/2 and R
    conv = convergence(_columns([zero, zero], steps=np.array([3, 3])))
    assert np.isnan(conv["not_converged_fraction"]) and np.isnan(conv["median_abs_change_half_to_full"])
