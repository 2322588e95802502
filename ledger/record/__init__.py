"""Stage 5: producers. The writer every producer appends through, JSON Lines ingest,
redaction, checkpoint signing, and the OpenAI Agents SDK recorder (:mod:`.integrations`).
"""
