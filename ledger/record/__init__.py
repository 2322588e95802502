"""Producers. The writer every producer appends through, JSON Lines ingest,
redaction, checkpoint signing, and the OpenAI Agents SDK recorder (:mod:`.integrations`).
"""
