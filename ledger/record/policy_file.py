"""Reading a guard policy file from disk (the parsing is pure:
:mod:`evidence_ledger.policy.model`)."""

from __future__ import annotations

import os

from evidence_ledger.policy.model import MAX_POLICY_BYTES, Policy, parse_policy
from evidence_ledger.storage.files import read_input

__all__ = ["read_policy"]


def read_policy(path: str | os.PathLike[str]) -> Policy:
    """The policy in the TOML file at ``path`` (at most
    :data:`~evidence_ledger.policy.model.MAX_POLICY_BYTES` bytes, refused before it is read).

    Raises:
        UsageError: if the file cannot be read; ``PolicyError`` (a ``UsageError``) if it is
            not a valid policy (one line naming the first problem).
    """
    data = read_input(path, largest=MAX_POLICY_BYTES, what="policy file")
    return parse_policy(data, os.fspath(path))
