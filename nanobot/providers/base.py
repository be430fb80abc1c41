"""The LLM provider interface: one chat call, optionally streamed, returning text and tool calls."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from nanobot.secrets import mask
from nanobot.util.text import valid_unicode, valid_unicode_in

StreamCallback = Callable[[str], Awaitable[None]]


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any] | str  # a str when the model sent JSON we could not parse

    def __post_init__(self) -> None:
        # a model may send a lone surrogate (half an emoji): no session file or request could hold it
        self.name = valid_unicode(self.name)
        self.arguments = valid_unicode_in(self.arguments)

    def to_message_dict(self) -> dict[str, Any]:
        import json

        args = (
            self.arguments
            if isinstance(self.arguments, str)
            else json.dumps(self.arguments, ensure_ascii=False)
        )
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": args}}


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens


@dataclass
class LLMResponse:
    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str = "stop"
    usage: Usage = field(default_factory=Usage)
    reasoning: str | None = None

    def __post_init__(self) -> None:
        # a lone surrogate in a reply (half an emoji) failed the session write and lost the reply
        self.content = valid_unicode_in(self.content)
        self.reasoning = valid_unicode_in(self.reasoning)

    @property
    def has_tool_calls(self) -> bool:
        return bool(self.tool_calls)


#: what went wrong, the same on every route (the message says it in words)
ERROR_KINDS = (
    "rate_limit",  # HTTP 429 after the retries
    "auth",  # HTTP 401/403: the credentials were refused
    "context_overflow",  # HTTP 400/413: the prompt is longer than the model's context window
    "bad_request",  # another 4xx: the request itself was rejected
    "server",  # HTTP 5xx after the retries
    "timeout",  # no answer within the time limit
    "connection",  # the endpoint could not be reached
    "cut_off",  # a streamed answer stopped before the model finished
    "malformed",  # the endpoint answered something that is not a completion
    "local",  # the embedded model failed
    "other",
)


class LLMError(Exception):
    """The provider failed after its retries; the message is safe to show a user.

    `kind` is one of ERROR_KINDS and `status` the HTTP status when there was one, so callers and
    tests can tell failures apart without parsing the message.
    """

    def __init__(self, message: str, *, kind: str = "other", status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


@dataclass(frozen=True)
class ChatRequest:
    """One `chat` call as its arguments: the conversation, the tools offered and the caller's options
    (None: the provider's own default)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    tool_choice: str | dict[str, Any] | None = None
    on_delta: StreamCallback | None = None


def masked_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as a model may see it: every registered secret and token shape in its text
    replaced by *** (README, "Secrets never leave"). Tool results are masked when they are made;
    what else reaches a prompt is masked here, in one place: files put into it (MEMORY.md and the
    bootstrap files, where a command may have written a key from its environment), memory context,
    the user's own words, earlier tool-call arguments. Messages without a secret are passed as they are."""
    return [_masked(message) for message in messages]


def _masked(message: dict[str, Any]) -> dict[str, Any]:
    changed: dict[str, Any] = {}
    content = message.get("content")
    if isinstance(content, str):
        if (hidden := mask(content)) != content:
            changed["content"] = hidden
    elif isinstance(content, list):  # parts: text is masked, images are left alone
        parts = [
            {**part, "text": mask(part["text"])}
            if isinstance(part, dict) and isinstance(part.get("text"), str)
            else part
            for part in content
        ]
        if parts != content:
            changed["content"] = parts
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        masked_calls = [_masked_call(call) for call in calls]
        if masked_calls != calls:
            changed["tool_calls"] = masked_calls
    return {**message, **changed} if changed else message


def _masked_call(call: Any) -> Any:
    function = call.get("function") if isinstance(call, dict) else None
    arguments = function.get("arguments") if isinstance(function, dict) else None
    if not isinstance(arguments, str) or (hidden := mask(arguments)) == arguments:
        return call
    return {**call, "function": {**function, "arguments": hidden}}


IMAGE_LEFT_OUT = "[an attached image: not shown, this model does not take images]"


def _is_image(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "image_url"


def has_images(messages: list[dict[str, Any]]) -> bool:
    return any(isinstance(m.get("content"), list) and any(map(_is_image, m["content"])) for m in messages)


def without_images(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` with every image part replaced by a line saying an image was left out."""
    if not has_images(messages):
        return messages
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list) and any(map(_is_image, content)):
            words = [IMAGE_LEFT_OUT if _is_image(p) else p.get("text") for p in content if isinstance(p, dict)]
            message = {**message, "content": "\n\n".join(w for w in words if isinstance(w, str))}
        out.append(message)
    return out


class LLMProvider(ABC):
    """What the agent needs from a model."""

    name: str = "base"
    #: core tools only / small prompt budgets for tiny local models
    is_small_local: bool = False
    #: the model said it takes no tools: it is asked without them, memory work in plain text
    tools_refused: bool = False
    #: the model refused a request for its images: attachments are described in words instead
    images_refused: bool = False

    @property
    @abstractmethod
    def default_model(self) -> str: ...

    async def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        on_delta: StreamCallback | None = None,
    ) -> LLMResponse:
        """One completion. `on_delta` (when given) receives text deltas as they stream in."""
        stream = None
        if on_delta is not None:
            sink = on_delta

            async def stream(delta: str) -> None:
                await sink(valid_unicode(delta))

        request = ChatRequest(masked_messages(messages), tools, max_tokens, temperature, tool_choice, stream)
        return await self._chat(request)

    async def _chat(self, call: ChatRequest) -> LLMResponse:
        """What a provider implements: the completion of `call`. (A test double may replace `chat`
        whole instead, which is why this is not abstract.)"""
        raise NotImplementedError(f"{type(self).__name__} implements neither chat nor _chat")

    def supports_vision(self) -> bool:
        """Whether this provider's model accepts images; unknown models do not."""
        return False

    def warm_up(self) -> None:
        """Blocking preparation worth doing before the first turn (e.g. importing a heavy client
        library); callers run it in a thread. The default has nothing to prepare."""
        return None

    async def aclose(self) -> None:  # pragma: no cover - default no-op
        return None
