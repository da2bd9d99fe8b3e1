"""Every judge of CLAIMS.md can fail: each row's judge, on the tiny models and on the real model, run on a planted
record built for it (test_claims_planted) must read "against the claim" or "not reproduced". The judges are found by
iterating the rows, so a judge added without a planted record fails here."""

import inspect
from functools import partial

import pytest

from lmaudit.claims.render import judge_one
from lmaudit.claims.table import CLAIMS
from lmaudit.claims.verdicts import AGAINST, NOT_REPRODUCED
from test_claims_planted import PLANTS


def unwrap(judge) -> tuple[str, dict]:
    """A judge's function name and its bound settings (a partial's keywords, a closure's variables)."""
    kw = {}
    while isinstance(judge, partial):
        kw = {**judge.keywords, **kw}
        judge = judge.func
    if judge.__closure__:
        kw = {**inspect.getclosurevars(judge).nonlocals, **kw}
    return judge.__qualname__.split(".")[0], kw


JUDGES = [(c, real) for c in CLAIMS for real in (False, True) if not real or c.real_judge is not None]


@pytest.mark.parametrize("claim, real", JUDGES, ids=[f"{'real' if r else 'tiny'}: {c.claim[:50]}" for c, r in JUDGES])
def test_every_judge_can_read_a_planted_record_as_against_or_not_reproduced(claim, real):
    judge = claim.real_judge if real else claim.judge
    names = claim.real_experiments if real else claim.experiments
    key, kw = unwrap(judge)
    assert key in PLANTS, f"no planted record for the judge {key}"
    found = judge_one(names, judge, PLANTS[key](names, kw), any_of=real)
    assert found.verdict in (AGAINST, NOT_REPRODUCED), (key, found.verdict, found.ours[:600])
