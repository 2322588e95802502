"""The JSON Schemas of evidence-ledger, shipped as package data (see pyproject.toml)."""
