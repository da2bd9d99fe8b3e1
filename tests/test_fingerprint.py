"""Model fingerprints key the probe cache: a damaged digest memo must never make two models share one."""

import shutil

import pytest

from lmaudit.models.fingerprint import model_dir_fingerprint
from lmaudit.utils import cache_dir


@pytest.fixture
def two_models(tmp_path, tiny_model_dir):
    a = tmp_path / "a"
    b = tmp_path / "b"
    shutil.copytree(tiny_model_dir, a)
    shutil.copytree(tiny_model_dir, b)
    # b: the same architecture with other weights
    from safetensors.torch import load_file, save_file

    weights = load_file(b / "model.safetensors")
    save_file({k: v + 0.01 if v.is_floating_point() else v for k, v in weights.items()}, b / "model.safetensors")
    return a, b


def test_empty_digest_memos_are_recomputed_not_shared(two_models):
    a, b = two_models
    truth = (model_dir_fingerprint(a), model_dir_fingerprint(b))
    assert truth[0] != truth[1]
    memos = list((cache_dir() / "digests").glob("*.txt"))
    assert len(memos) == 2
    for memo in memos:  # what a full disk left behind: files with no content
        memo.write_text("")
    with pytest.warns(UserWarning, match="damaged"):
        again = (model_dir_fingerprint(a), model_dir_fingerprint(b))
    assert again == truth
    assert all(len(m.read_text()) == 32 for m in memos)  # rewritten whole


def test_a_torn_digest_memo_is_recomputed(two_models):
    a, _ = two_models
    truth = model_dir_fingerprint(a)
    memo = next((cache_dir() / "digests").glob("*.txt"))
    memo.write_text(memo.read_text()[:7])
    with pytest.warns(UserWarning, match="damaged"):
        assert model_dir_fingerprint(a) == truth

