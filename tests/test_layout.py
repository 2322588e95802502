"""The package's layout shows its data path: stages in one direction, the CLI on the API.

``ledger/`` ships as ``evidence_ledger``. Every module lives in the subpackage of one stage
(:data:`STAGES`, bottom first, written here once); a module imports only from its own stage
or from stages below it, counting imports inside functions and ``TYPE_CHECKING`` blocks.
The CLI (``cli/``, shipped as ``evidence_ledger.cli``) and the examples import only the
public API, ``evidence_ledger`` itself. Checked by reading the source (``ast``), not by
importing it, so a lazy import cannot hide.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "evidence_ledger"

STAGES = (
    "format",    # pure: exception root, canonical encoding, entries, framing, digests
    "tlog",      # pure: Merkle maths, proofs, signed notes, checkpoints
    "storage",   # the ledger directory on disk: log, payloads, tiles, checkpoints, keys
    "policy",    # pure: the guard's policy file and its judgement of the evidence
    "verify",    # findings, rules, lineage (pure); the audit that feeds them
    "record",    # producers: writer, ingest, redaction, checkpoint signing, SDK recorder
    "index",     # consumer: DuckDB index, queries, export, trace
    "bundle",    # consumer: proof bundles, built and verified
    "sessions",  # consumer: scan and repair SDK sessions
    "views",     # consumer: evidence for people: payload values, value diffs, HTML reports
    "api",       # the public API's own code, re-exported by evidence_ledger/__init__.py
)
"""The stages of the data path, bottom first."""

COMPILED = {"_native": "format"}
"""Subpackages of compiled code, by the stage they belong to: the native core (Rust,
``ledger/_native/``) is the compiled half of ``format``."""

CLIENTS = {"cli": ROOT / "cli", "examples": ROOT / "examples"}
"""Folders shipped inside the package that may import only the public API."""


def _module_name(path: Path, top: Path, prefix: str) -> str:
    parts = list(path.relative_to(top).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([prefix, *parts])


def _imports(path: Path, module: str) -> list[tuple[int, str]]:
    """Every module ``path`` imports (absolute names), anywhere in the file."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.append((node.lineno, name))
            found += [(node.lineno, f"{name}.{alias.name}") for alias in node.names]
    return found


def _stage(name: str) -> int | None:
    parts = name.split(".")
    if parts[0] != PACKAGE or len(parts) < 2:
        return None
    stage = COMPILED.get(parts[1], parts[1])
    return STAGES.index(stage) if stage in STAGES else None


def _package_modules() -> list[tuple[Path, str]]:
    return [(p, _module_name(p, ROOT / "ledger", PACKAGE))
            for p in sorted((ROOT / "ledger").rglob("*.py"))]


def test_the_package_docstring_draws_the_stages_in_order():
    import evidence_ledger

    drawn = " ".join((evidence_ledger.__doc__ or "").split())  # the drawing may wrap
    assert f":: {' -> '.join(STAGES)} ``format``" in drawn


def test_every_module_is_in_one_stage():
    loose = [name for path, name in _package_modules()
             if name != PACKAGE and _stage(name) is None]
    assert loose == [], f"modules outside every stage of {STAGES}: {loose}"
    assert sorted(p.name for p in (ROOT / "ledger").iterdir() if p.suffix == ".py") == [
        "__init__.py"
    ], "the package root holds only the public API"


def test_no_import_runs_back_up_the_data_path():
    upward = []
    for path, name in _package_modules():
        own = _stage(name)
        for line, imported in _imports(path, name):
            if imported.split(".")[0] in CLIENTS or imported.startswith(f"{PACKAGE}.cli"):
                upward.append(f"{path.relative_to(ROOT)}:{line} imports {imported} (the CLI)")
            target = _stage(imported)
            if own is not None and target is not None and target > own:
                upward.append(f"{path.relative_to(ROOT)}:{line} ({STAGES[own]}) imports "
                              f"{imported} ({STAGES[target]})")
    assert upward == [], "imports running back up the data path:\n" + "\n".join(upward)


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_clients_import_only_the_public_api(client):
    folder = CLIENTS[client]
    inside = []
    for path in sorted(folder.rglob("*.py")):
        name = _module_name(path, folder, f"{PACKAGE}.{client}")
        for line, imported in _imports(path, name):
            if imported.startswith(f"{PACKAGE}.") and not imported.startswith(
                    f"{PACKAGE}.{client}"):
                if imported.count(".") == 1 and imported.split(".")[1] not in STAGES:
                    continue  # a name of the public API: from evidence_ledger import X
                inside.append(f"{path.relative_to(ROOT)}:{line} imports {imported}")
    assert inside == [], f"{client} must use the public API only:\n" + "\n".join(inside)


def test_no_module_imports_the_generic_names():
    generic = []
    for folder in ("ledger", "cli", "tests", "examples", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line, imported in _imports(path, "x.y"):
                if imported.split(".")[0] in ("ledger", "cli"):
                    generic.append(f"{path.relative_to(ROOT)}:{line} imports {imported}")
    assert generic == [], "import evidence_ledger, never ledger or cli:\n" + "\n".join(generic)


def test_pyproject_ships_every_package_folder():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    shipped = set(config["packages"])
    folders = {_module_name(p.parent / "__init__.py", ROOT / "ledger", PACKAGE)
               for p in (ROOT / "ledger").rglob("__init__.py")}
    folders |= {f"{PACKAGE}.{c}" for c in CLIENTS}
    assert folders <= shipped, f"not shipped: {sorted(folders - shipped)}"
    assert config["package-dir"][PACKAGE] == "ledger"
