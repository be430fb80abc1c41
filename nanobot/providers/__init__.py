"""LLM providers: the interface, litellm, the embedded local model, resolution and token counting."""

from nanobot.providers.base import LLMError, LLMProvider, LLMResponse, ToolCall, Usage

__all__ = ["LLMError", "LLMProvider", "LLMResponse", "ToolCall", "Usage"]
