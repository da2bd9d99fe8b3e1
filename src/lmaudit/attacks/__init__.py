"""Membership-inference attacks: one module each, registered by a decorator."""

from lmaudit.attacks import gap_k, loss, min_k, min_k_pp, reference, zlib_ratio  # noqa: F401  (AR registration)
from lmaudit.attacks import dlm_baselines, q_skew, secmi_sama  # noqa: F401  (DLM registration)
from lmaudit.attacks import shadow  # noqa: F401  (LiRA, RMIA: need shadow models)
from lmaudit.attacks.registry import AttackSpec, get_attack, list_attacks, register_attack

__all__ = ["AttackSpec", "get_attack", "list_attacks", "register_attack"]
