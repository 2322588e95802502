"""Recorders that feed a ledger from agent frameworks: :mod:`.openai_agents` (OpenAI Agents SDK)."""
