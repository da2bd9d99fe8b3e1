"""Membership-inference attacks: one module each, found and registered without a hand-written list."""

from lmaudit.attacks.registry import AttackSpec, get_attack, list_attacks, register_attack

__all__ = ["AttackSpec", "get_attack", "list_attacks", "register_attack"]
