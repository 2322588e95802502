"""The JSON Schemas in ``schemas/`` at the top of the project, loaded by name.

They ship inside the wheel as the package ``evidence_ledger_schemas`` (see
pyproject.toml), so an installed copy finds them as a checkout does.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
from pathlib import Path
from typing import Any

import jsonschema

SCHEMA_DIR = Path(str(importlib.resources.files("evidence_ledger_schemas")))


@functools.cache
def load(name: str) -> dict[str, Any]:
    """The schema ``schemas/<name>.schema.json`` as a dict.

    Raises:
        FileNotFoundError: if no such schema ships with the project.
    """
    schema: dict[str, Any] = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text("utf-8"))
    return schema


@functools.cache
def validator(name: str) -> jsonschema.protocols.Validator:
    """A Draft 2020-12 validator for ``schemas/<name>.schema.json``."""
    schema = load(name)
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


def first_error(name: str, instance: Any) -> str | None:
    """The most relevant validation error of ``instance`` as one line, or None if valid."""
    error = jsonschema.exceptions.best_match(validator(name).iter_errors(instance))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where}: {error.message}" if where else error.message
