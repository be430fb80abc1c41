"""Cleaning a model's final answer before it is stored or sent.

Weak models (small local ones often, hosted ones now and then) echo the runtime block that travels
on every user message, or leak their chat template's control tokens. Neither may reach the user or
the session file, where later prompts would repeat it. `clean_reply` removes:

- a leading runtime block echo: the header line (exact or recognisably garbled) and the metadata lines
  that follow it (`Time: …`, `Channel: … | Chat: …`, `Sender: …`), then any lines the prompt's user
  message holds word for word (the memory facts the block carries, the user's own words);
- a whole reply that is nothing but such metadata;
- chat-template control tokens (`<|im_start|>assistant`, `<|eot_id|>`, `</s>`, `[INST]`…);
- a reasoning model's leading `<think>…</think>` (or `<thinking>`) block, one that never closes, and
  what comes before a lone closing tag (the template opened the block in the prompt): its reasoning
  is not the answer, and kept in the session it would go into every later prompt.

What is left is stripped; an empty result is the caller's signal to send `NO_ANSWER_REPLY` instead of
an empty chat message. A streamed answer is previewed through `StreamCleaner` (`previewed`): the
reasoning block and the control tokens never show while it arrives either.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

# Control tokens of the common chat templates: ChatML, Llama 2/3, Gemma, Mistral, Phi, Zephyr, GPT-2.
_TEMPLATE_TOKEN = re.compile(
    r"<\|im_start\|>(?:system|user|assistant|tool)?\n?"
    r"|<\|im_end\|>|<\|endoftext\|>|<\|end\|>|<\|eot_id\|>|<\|begin_of_text\|>|<\|end_of_text\|>"
    r"|<\|start_header_id\|>\w*<\|end_header_id\|>\n?"
    r"|<\|(?:system|user|assistant)\|>\n?"
    r"|<start_of_turn>(?:user|model)?\n?|<end_of_turn>"
    r"|</?s>|\[/?INST\]|<<SYS>>|<</SYS>>"
)
# The runtime block's header, also when a model garbles it ("Runtime context: metadata …").
_HEADER = re.compile(r"^\s*\[?\s*runtime\s+context\b[^\n]*$", re.IGNORECASE)
# Metadata lines of the runtime block: "Time: …", "Channel: cli | Chat: direct", "Sender: …", also
# wrapped in brackets as a small model echoes them ("[Time: …" … "Sender: user]").
_METADATA = re.compile(r"^\s*[\[(]?\s*(?:time|date|channel|chat|sender)\s*:.*$", re.IGNORECASE)
# The block's most distinctive line: "Channel: telegram | Chat: 42 | Sender: 7".
_CHANNEL_LINE = re.compile(r"^\s*[\[(]?\s*channel\s*:[^\n|]*\|\s*chat\s*:", re.IGNORECASE)


# The label of the memory facts the block may carry, also reworded ("Relevant facts from my memory…").
_MEMORY_LABEL = re.compile(r"^\s*[\[(]?\s*relevant\b[^\n]*\bmemory\b[^\n]*:\s*$", re.IGNORECASE)


# A tool call written out as text ("functions.read_file:" then its JSON arguments on the next line),
# as small models echo the function-calling template instead of calling the tool.
_THINK_BLOCK = re.compile(r"\A\s*<(think|thinking)>.*?(?:</\1>|\Z)", re.S | re.I)
# Only the closing tag: the chat template put the opening one in the prompt (Qwen3 or R1 distills
# served without a reasoning parser), so the reply is "reasoning…</think>\n\nanswer".
# The tag ends its line there (an answer that writes about the tag mentions it mid-sentence).
_THINK_END = re.compile(r"</(?:think|thinking)>[ \t]*(?:\n|\Z)", re.I)
_THINK_START = re.compile(r"<(?:think|thinking)>", re.I)
_CALL_MARKUP = re.compile(r"\A\s*(?:functions\.[\w.-]+:[ \t]*\n?(?:[ \t]*\{[^\n]*\}[ \t]*(?:\n|\Z))?\s*)+")


def strip_reasoning(text: str) -> str:
    """`text` without a leading reasoning block, or what comes before a closing tag no opening one
    precedes."""
    text = _THINK_BLOCK.sub("", text)
    end = _THINK_END.search(text)
    if end is None or _THINK_START.search(text, 0, end.start()) is not None:
        return text
    if "```" in text[: end.start()] or text[: end.start()].rstrip().endswith("`"):
        return text  # the tag shown in an answer about it (a code block, inline code), not reasoning
    return text[end.end() :]


def strip_template_tokens(text: str) -> str:
    return _TEMPLATE_TOKEN.sub("", text)


def _echo_key(line: str) -> str:
    """A line as compared with the prompt: without a list bullet (echoes add or drop them), spaces."""
    return re.sub(r"^[\s>*•-]+", "", line).strip().lower()


_MIN_COPIED_CHARS = 16  # "time: 2026-11-29": a shorter start of a prompt line may be the answer's own


def _copies_a_line(line: str, prompt_lines: set[str]) -> bool:
    """Whether a metadata line repeats a line of the prompt, whole or its start, brackets aside."""
    key = _echo_key(line).strip("[]() ")
    return key in prompt_lines or (
        len(key) >= _MIN_COPIED_CHARS and any(prompt.startswith(key) for prompt in prompt_lines)
    )


def strip_runtime_echo(text: str, echo_source: str = "") -> str:
    """`text` without a leading echo of the runtime block (header and/or its metadata lines, then
    lines of `echo_source`, the prompt's user message, repeated word for word)."""
    lines = text.split("\n")
    start = 0
    while start < len(lines) and not lines[start].strip():
        start += 1
    i = start
    saw_header = i < len(lines) and bool(_HEADER.match(lines[i]))
    if saw_header:
        i += 1
    saw_channel = False
    while i < len(lines) and _METADATA.match(lines[i]):
        saw_channel = saw_channel or bool(_CHANNEL_LINE.match(lines[i]))
        i += 1
    prompt_lines = {_echo_key(line) for line in echo_source.split("\n")} - {""}
    # Without the header, metadata lines are an echo only with the block's "Channel: … | Chat: …"
    # line among them, or when each copies a line of the block ("[Time: 2026-11-29 01:36]", the
    # demo model's habit) and an answer follows: "Date: Monday / Time: 10:00" is an answer.
    if not (saw_header or saw_channel):
        copied = i > start and all(_copies_a_line(lines[n], prompt_lines) for n in range(start, i))
        if not copied or not "\n".join(lines[i:]).strip():
            return text
    while i < len(lines) and (_echo_key(lines[i]) in prompt_lines or _MEMORY_LABEL.match(lines[i])):
        i += 1
    return "\n".join(lines[i:])


def clean_reply(text: str | None, echo_source: str = "") -> str:
    """The answer as the user should see it (may be empty: then send NO_ANSWER_REPLY); `echo_source`
    is the text of the prompt's user message (with its runtime block)."""
    if not text:
        return ""
    cleaned = strip_template_tokens(strip_reasoning(text))
    cleaned = strip_runtime_echo(cleaned, echo_source)
    cleaned = _CALL_MARKUP.sub("", cleaned)
    return cleaned.strip()


_THINK_OPENERS = ("<think>", "<thinking>")
_HELD_TAIL_CHARS = 24  # the longest control token a delta may have cut in two, held until complete


def _unfinished_tail(text: str) -> int:
    """Where a trailing piece that may still become a control token starts (`<|eot_i`, `[/INS`),
    or len(text)."""
    start = max(text.rfind("<"), text.rfind("["))
    if start < 0 or len(text) - start > _HELD_TAIL_CHARS or any(c in text[start:] for c in ">]\n"):
        return len(text)
    return start


class StreamCleaner:
    """The part of a streamed answer a chat may preview: a leading reasoning block is held back until
    it closes (and never shown), control tokens are dropped, a piece that may still become one waits
    for the next delta. The final answer goes through `clean_reply` and replaces the preview."""

    def __init__(self) -> None:
        self._raw = ""
        self._shown = ""

    def feed(self, delta: str) -> str:
        """The text to append to the preview after `delta` ("" when nothing new may be shown)."""
        self._raw += delta
        head = self._raw.lstrip().lower()
        if any(opener.startswith(head) for opener in _THINK_OPENERS):
            return ""  # perhaps a reasoning block's opening tag, still arriving
        visible = strip_template_tokens(strip_reasoning(self._raw)).lstrip()
        visible = visible[: _unfinished_tail(visible)]
        if not visible.startswith(self._shown):
            return ""  # earlier text reads otherwise now; the final answer corrects the preview
        new, self._shown = visible[len(self._shown) :], visible
        return new


def previewed(on_delta: Callable[[str], Awaitable[None]]) -> Callable[[str], Awaitable[None]]:
    """`on_delta` fed through a fresh StreamCleaner: one per model response, since each may open
    with its own reasoning block."""
    cleaner = StreamCleaner()

    async def forward(delta: str) -> None:
        if text := cleaner.feed(delta):
            await on_delta(text)

    return forward
