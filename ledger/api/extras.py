"""Optional extras: which installed extra each optional dependency comes from, and the one
error a command raises when its extra is missing.

The base install (``pip install evidence-ledger``) verifies: bundles, checkpoints and a
ledger's log need only ``cryptography`` and ``msgpack`` (with ``rfc8785``,
``securesystemslib`` and ``jsonschema``, small pure-Python libraries, and the CLI's ``typer``
and ``rich``). Recording needs ``[agents]``; SQL, exports and ``trace`` need ``[query]``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from types import ModuleType
from typing import Any, NoReturn

from evidence_ledger.format.errors import UsageError

__all__ = ["EXTRAS", "MissingExtraError", "load", "missing"]

EXTRAS = {
    "agents": {"agents": "openai-agents"},
    "query": {"duckdb": "duckdb", "pyarrow": "pyarrow",
              "opentelemetry": "opentelemetry-semantic-conventions"},
}
"""Extra name -> the top-level modules it installs -> the package that installs each."""


class MissingExtraError(UsageError):
    """A feature needs an optional extra that is not installed (exit code 2)."""

    def __init__(self, extra: str, what: str, missing: str) -> None:
        """``missing``: the package (distribution) name that is not installed."""
        super().__init__(
            f"{what} needs the '{extra}' extra ({missing} is not installed): "
            f"{install_command(extra)} (or install this project with [{extra}])"
        )
        self.extra = extra


def install_command(extra: str) -> str:
    """``pip install`` of the packages ``extra`` adds, with the versions this install
    requires (read from its metadata; the package names of :data:`EXTRAS` if it has none):
    the project itself need not be on a package index."""
    try:
        required = importlib.metadata.requires("evidence-ledger") or []
    except importlib.metadata.PackageNotFoundError:
        required = []
    marker = re.compile(rf"""extra\s*==\s*["']{re.escape(extra)}["']""")
    wanted = [r.split(";")[0].strip() for r in required
              if marker.search(r) and not r.startswith("evidence-ledger")]
    wanted = wanted or sorted(set(EXTRAS[extra].values()))
    return "pip install " + " ".join(f"'{w}'" for w in wanted)


def load(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` (one of this package's modules that needs ``extra``).

    Args:
        module: absolute module name, e.g. ``evidence_ledger.index.query``.
        extra: the extra whose packages it imports (a key of :data:`EXTRAS`).
        what: what the caller is doing, for the message (``"query"``).

    Raises:
        MissingExtraError: if a package of ``extra`` is missing. Any other ImportError
            (a broken install) propagates unchanged.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing in EXTRAS[extra]:
            raise MissingExtraError(extra, what, EXTRAS[extra][missing]) from exc
        raise


def missing(name: str, error: MissingExtraError) -> type:
    """A stand-in for the public class ``name`` whose extra is missing: a class whose
    construction raises ``error`` (so the name can be listed, documented and imported)."""

    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise error

    return type(name, (), {
        "__new__": refuse, "__module__": "evidence_ledger",
        "__doc__": f"Not available: {error}",
    })
