"""Asking the memory model until its answer passes the checks.

Consolidation, the pre-compaction flush, session notes and the small-model profile all talk to the
model the same way: ask, check the answer (`memory.validation`), and when it is refused ask again
with the reason stated, up to a fixed number of attempts. `ask_until_accepted` is that loop; each
caller supplies how to ask, how to check and how the retry prompt reads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from loguru import logger

from nanobot.memory.validation import Refusal
from nanobot.providers.base import LLMResponse

T = TypeVar("T")
Prompt = list[dict[str, Any]]
MAX_ATTEMPTS = 2  # a refused answer is asked again once, with the reason stated


async def ask_until_accepted(
    ask: Callable[[Prompt], Awaitable[LLMResponse]],
    prompt: Prompt,
    check: Callable[[LLMResponse], T | Refusal],
    retry: Callable[[Prompt, Refusal], Prompt],
    *,
    what: str,
    outcomes: Counter[str] | None = None,
) -> T | Refusal:
    """The first accepted answer, or the last refusal after MAX_ATTEMPTS tries. `retry` makes the next
    prompt from the current one and the refusal; `outcomes` (when given) counts "refused:<rule>" and
    "retried". A failed model call (LLMError) propagates to the caller."""
    verdict: T | Refusal = Refusal("empty", "answer", "no answer")
    for attempt in range(MAX_ATTEMPTS):
        verdict = check(await ask(prompt))
        if not isinstance(verdict, Refusal):
            return verdict
        if outcomes is not None:
            outcomes[f"refused:{verdict.rule}"] += 1
        logger.warning("{} attempt {} refused: {}", what, attempt + 1, verdict.logged_reason)
        if attempt + 1 < MAX_ATTEMPTS:
            if outcomes is not None:
                outcomes["retried"] += 1
            prompt = retry(prompt, verdict)
    return verdict
