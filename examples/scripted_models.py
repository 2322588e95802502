"""Scripted models for the examples that run under any openai-agents 0.20 - 0.24: the
SDK's ``agents.testing.ScriptedModel`` where it has one (0.21 on), else a tiny one of our
own. Offline: nothing here calls a model provider."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from agents import Usage
from agents.items import ModelResponse
from agents.models.interface import Model
from openai.types.responses import Response, ResponseCompletedEvent

Responder = Callable[[Any], list[Any]]
"""A model turn: the model's input (a list of items) -> its output items."""


class TinyScriptedModel(Model):
    """The smallest ``Model`` that plays a :data:`Responder`, streamed or not."""

    def __init__(self, respond: Responder) -> None:
        self.respond = respond

    async def get_response(self, system_instructions: Any, input: Any, *args: Any,
                           **kwargs: Any) -> ModelResponse:
        return ModelResponse(output=self.respond(input), usage=Usage(), response_id="resp-tiny")

    async def stream_response(self, system_instructions: Any, input: Any, *args: Any,
                              **kwargs: Any) -> AsyncIterator[Any]:
        response = Response(
            id="resp-tiny", created_at=0, model="tiny", object="response",
            output=self.respond(input), tool_choice="none", tools=[], top_p=None,
            parallel_tool_calls=False, status="completed",
        )
        yield ResponseCompletedEvent(type="response.completed", response=response,
                                     sequence_number=0)


def responding_model(respond: Responder, turns: int) -> Model:
    """A model whose every turn (at most ``turns``) is ``respond``: ``ScriptedModel`` of
    ``ModelStep.respond`` steps, or :class:`TinyScriptedModel`."""
    try:
        from agents.testing import ModelStep, ScriptedModel
    except ImportError:
        return TinyScriptedModel(respond)
    return ScriptedModel([ModelStep.respond(lambda call: respond(call.input))] * turns)


def steps_model(steps: list[list[Any]]) -> Model:
    """A model answering its turns with ``steps`` in order (each a list of output items)."""
    left = list(steps)
    return responding_model(lambda _input: left.pop(0), len(steps))
