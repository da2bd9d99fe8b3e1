"""PII reconstruction scores candidates through the sharded probe: cached, and the same on every backend."""

import numpy as np
import pytest

from lmaudit.attacks.q_skew import weighted_skew
from lmaudit.data.loaders import Record, TextSet
from lmaudit.extraction.reconstruct import PIIRecord
from lmaudit.models.loading import load_model
from lmaudit.probes.backends import LocalBackend, use_backend
from lmaudit.probes.masked import masked_window_stats
from lmaudit.probes.masks import MaskPlan
from lmaudit.runs.pii_candidates import WindowTask, _window, skew_scores, window_logp

REC = PIIRecord("r1", "Please write to the maintainer at ", " before the next release of the package.", None)
VALUES = ["ann.lee@example.org", "bo@mail.net", "c.d.e@x.io"]


class CountingBackend(LocalBackend):
    """The local backend, counting the shards it computes."""

    def __init__(self) -> None:
        self.shards = 0

    def map(self, handle, task, shards):
        for index, result in super().map(handle, task, shards):
            self.shards += 1
            yield index, result


@pytest.fixture
def dlm(tiny_dlm_dir):
    return load_model(tiny_dlm_dir)


def test_window_scores_equal_a_direct_masked_forward(dlm):
    task = WindowTask(MaskPlan("cyclic", budget=6, rho=0.35), "pii", 20, 0)
    logp, offsets = window_logp(dlm, REC, VALUES, task)
    windows, allowed, seeds = task.windows(dlm.tokenizer, _candidates_as_set())
    stats, direct_offsets = masked_window_stats(dlm, windows, allowed, task.plan, seeds)
    np.testing.assert_array_equal(offsets, direct_offsets)
    np.testing.assert_array_equal(logp, stats[:, 0].astype(np.float64))
    # every masked entry lies on the field: each window's entries are its field tokens, once per cyclic round
    for i, value in enumerate(VALUES):
        _, is_field = _window(dlm.tokenizer, REC, value, 20)
        rounds = 6 // 3
        assert offsets[i + 1] - offsets[i] == rounds * is_field.sum()


def test_second_ranking_of_the_same_candidates_does_no_forward_pass(dlm):
    task = WindowTask(MaskPlan("cyclic", budget=6, rho=0.35), "context", 20, 0)
    first, second = CountingBackend(), CountingBackend()
    with use_backend(first, close=False):
        a, _ = window_logp(dlm, REC, VALUES, task)
    with use_backend(second, close=False):
        b, _ = window_logp(dlm, REC, VALUES, task)
    assert first.shards == 1 and second.shards == 0
    np.testing.assert_array_equal(a, b)


def test_skew_scores_compare_target_and_reference_on_identical_masks(dlm):
    # the same model as its own reference: every gap is 0, so every candidate's skew is 0
    np.testing.assert_array_equal(skew_scores(dlm, dlm, REC, VALUES, where="pii"), 0.0)
    task = WindowTask(MaskPlan("cyclic", budget=12, rho=0.35), "pii", 20, 0)
    tar, offsets = window_logp(dlm, REC, VALUES, task)
    np.testing.assert_allclose(weighted_skew(tar - tar, offsets), 0.0)


def _candidates_as_set():
    return TextSet([Record(f"r1:{i}", v, fields={"record": REC.id, "left": REC.left, "right": REC.right})
                    for i, v in enumerate(VALUES)])
