"""Search policies: which configuration to evaluate next. A library: never imports ``tuned``."""

from __future__ import annotations

from typing import Any

from policies.base import Config, KnobValue, Policy, SearchSpace, Suggestion, Trial, config_key
from policies.random_search import RandomPolicy

__all__ = [
    "POLICIES",
    "Config",
    "KnobValue",
    "Policy",
    "RandomPolicy",
    "SearchSpace",
    "Suggestion",
    "Trial",
    "config_key",
    "make_policy",
    "restore_policy",
]

#: Name -> class. Every policy has ``from_dict(state)`` as a classmethod.
POLICIES: dict[str, Any] = {
    RandomPolicy.name: RandomPolicy,
}


def _lookup(name: str) -> Any:
    try:
        return POLICIES[name]
    except KeyError:
        valid = ", ".join(sorted(POLICIES))
        raise ValueError(f"unknown policy {name!r}; valid policies: {valid}") from None


def make_policy(name: str) -> Policy:
    """A new policy with its default settings."""
    policy: Policy = _lookup(name)()
    return policy


def restore_policy(name: str, state: dict[str, Any]) -> Policy:
    """A policy restored from ``to_dict()`` output."""
    policy: Policy = _lookup(name).from_dict(state)
    return policy
