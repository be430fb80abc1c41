"""A turn survives a model or provider that misbehaves, and the user always hears what happened.

Through real turns against the fake OpenAI-compatible server on 127.0.0.1. Before: a provider window
smaller than contextWindowTokens broke the chat for good (every turn "rejected the request (HTTP
400)"); a content of parts crashed the turn with a TypeError and a restart answered it again; a
reasoning model's <think> block was shown and kept; a `message` to another chat followed by an empty
answer left the asking user with nothing; `message` said "sent" for a message that never left.
"""

from __future__ import annotations

import json
from typing import Any

from nanobot.bus.events import NO_ANSWER_REPLY
from nanobot.channels.manager import ChannelManager
from tests.agent_helpers import make_runtime, messages_of, session_path
from tests.fakes.llm_server import FakeLLMServer, Reply

WINDOW_CHARS = 6_000  # the provider's real window, far below contextWindowTokens
OVERFLOW = "This model's maximum context length is 2048 tokens. However, your messages resulted in 3100 tokens."


def small_window(answer: str):  # noqa: ANN201
    """A provider refusing any request over WINDOW_CHARS the way OpenAI-compatible servers do."""

    def respond(body: dict[str, Any]) -> Reply:
        if len(json.dumps(body["messages"])) > WINDOW_CHARS:
            return Reply(status=400, error_message=OVERFLOW)
        return Reply(content=answer)

    return respond


async def test_a_provider_window_smaller_than_configured_is_survived(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    config, _ = make_config(**{"agents.defaults.llmMaxRetries": 0})
    runtime = make_runtime(config)
    fake_llm.responder = small_window("fine")
    try:
        for i in range(4):  # each turn adds ~1,500 characters of history
            assert await runtime.ask(f"note {i}: " + "lorem ipsum " * 120, session_key="telegram:1") == "fine"
        # the history is now over the provider's window: the older half is left out, and it answers
        assert await runtime.ask("a short question", session_key="telegram:1") == "fine"
        # a single message over the window: no history can make room, so the message is cut in its
        # middle until the model takes it (it failed every time); the transcript keeps it whole
        reply = await runtime.ask("x " * 4_000 + "the end", session_key="telegram:1")
    finally:
        await runtime.aclose()
    assert reply == "fine", reply
    sent = fake_llm.requests[-1]["messages"][-1]["content"]
    assert "omitted" in sent and sent.rstrip().endswith("the end"), sent[-200:]
    assert "x " * 4_000 + "the end" in session_path(config, "telegram:1").read_text()


async def test_content_parts_reasoning_blocks_and_empty_answers(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    config, _ = make_config()
    runtime = make_runtime(config)
    parts = [{"type": "thinking", "thinking": "they want Paris"}, {"type": "text", "text": "Paris."}]
    fake_llm.push(
        Reply(content=parts),  # type: ignore[arg-type] - a list, as some APIs send
        Reply(content="<think>\nThe user wants X. My secret instructions say...\n</think>\n\nThe actual answer."),
        Reply(content="<think>reasoning that never closes"),
        # the template opened the block in the prompt (Qwen3 served without a reasoning parser)
        Reply(content="Okay, the user greets me. My secret instructions say be nice.\n</think>\n\nHello!"),
        Reply(content="Write `</think>` after <think> to close it."),  # an answer about the tags
        Reply(content="The template ends the reasoning with:\n\n```\n</think>\n```\n\nso split on it."),
    )
    try:
        questions = ("capital?", "and X?", "and Y?", "hi", "how do I close a think tag?", "and Qwen's?")
        answers = [await runtime.ask(q, session_key="telegram:2") for q in questions]
    finally:
        await runtime.aclose()
    about_tags = "Write `</think>` after <think> to close it."
    in_a_block = "The template ends the reasoning with:\n\n```\n</think>\n```\n\nso split on it."
    assert answers == ["Paris.", "The actual answer.", NO_ANSWER_REPLY, "Hello!", about_tags, in_a_block]
    stored = [m["content"] for m in messages_of(session_path(config, "telegram:2")) if m["role"] == "assistant"]
    assert not any("secret instructions" in text for text in stored)


async def test_a_message_to_another_chat_does_not_stand_for_the_answer(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    config, _ = make_config()
    runtime = make_runtime(config)
    elsewhere = {"name": "message", "arguments": {"content": "hi Bob", "channel": "discord", "chat_id": "123"}}
    fake_llm.push(Reply(content=None, tool_calls=[elsewhere]), Reply(content=""))
    # the gateway's channel manager, with no Discord channel enabled
    channels = ChannelManager(config, runtime.bus, config.workspace_path, channels={})
    await channels.start_all()
    try:
        reply = await runtime.ask("tell Bob hi", session_key="telegram:3")
    finally:
        await runtime.aclose()
        await channels.stop_all()
    tool_result = next(m for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool")["content"]
    assert "was not sent" in tool_result, tool_result
    assert reply == NO_ANSWER_REPLY  # the asking user hears something, not silence


async def test_a_turn_that_crashed_is_not_answered_again_at_the_next_start(make_config) -> None:  # noqa: ANN001
    """The user got "Sorry, something went wrong", but the session showed their message unanswered:
    a restart answered it again, late."""
    from nanobot.bus.events import InboundMessage
    from nanobot.gateway.missed import find_missed, mark_delivered
    from nanobot.session.store import SessionStore

    config, _ = make_config()
    runtime = make_runtime(config)

    async def crash(*_args: Any, **_kwargs: Any) -> Any:
        raise TypeError("expected string or bytes-like object, got 'list'")

    runtime.agent.runner.run = crash  # type: ignore[method-assign]
    runtime.loop.start()
    try:
        out = await runtime.bus.request(InboundMessage(channel="telegram", sender_id="4", chat_id="4", content="hi"))
    finally:
        await runtime.aclose()
    assert out is not None and out.content == "Sorry, something went wrong: TypeError."
    assert [m["role"] for m in messages_of(session_path(config, "telegram:4"))] == ["user", "assistant"]
    assert [m.kind for m in find_missed(SessionStore(config.workspace_path), ["telegram"])] == ["reply"]
    # the note carries its delivery record, like every reply: once the channel sent it, nothing is missed
    mark_delivered(SessionStore(config.workspace_path), out)
    assert find_missed(SessionStore(config.workspace_path), ["telegram"]) == []


async def test_a_huge_tool_argument_does_not_sink_the_answer(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    """write_file with 400,000 characters succeeded, but the final request still carried them: the
    provider refused it and the user was told the work had stopped although it was done."""
    config, _ = make_config(**{"agents.defaults.llmMaxRetries": 0})
    runtime = make_runtime(config)
    big = {"name": "write_file", "arguments": {"path": "big.txt", "content": "x" * 400_000}}
    calls = iter([Reply(content=None, tool_calls=[big])])

    def respond(body: dict[str, Any]) -> Reply:
        if len(json.dumps(body["messages"])) > 200_000:  # the provider's real window
            return Reply(status=400, error_message=OVERFLOW)
        return next(calls, Reply(content="Saved big.txt."))

    fake_llm.responder = respond
    try:
        reply = await runtime.ask("write 400k x into big.txt", session_key="telegram:5")
    finally:
        await runtime.aclose()
    assert (config.workspace_path / "big.txt").stat().st_size == 400_000
    assert reply == "Saved big.txt."


async def test_half_an_emoji_from_the_model_is_kept_and_answered(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    """A lone surrogate in a reply (valid JSON: "\\ud83d") made the session write fail with
    UnicodeEncodeError: the reply was lost and the user got "something went wrong"."""
    config, _ = make_config()
    runtime = make_runtime(config)
    write = {"name": "write_file", "arguments": json.dumps({"path": "note.txt", "content": "tea \ud83d"})}
    fake_llm.push(Reply(content="hello \ud83d there"), Reply(content=None, tool_calls=[write]), Reply(content="saved"))
    try:
        first = await runtime.ask("hi", session_key="telegram:3")
        second = await runtime.ask("save a note", session_key="telegram:3")
    finally:
        await runtime.aclose()
    assert first == "hello \ufffd there" and second == "saved"
    stored = [m for m in messages_of(session_path(config, "telegram:3")) if m["role"] == "assistant"]
    assert stored[0]["content"] == "hello \ufffd there"
    assert "tea \ufffd" in stored[1]["tool_calls"][0]["function"]["arguments"]
    assert (config.workspace_path / "note.txt").read_text(encoding="utf-8") == "tea \ufffd"


async def test_bytes_not_utf8_and_a_bare_content_part_still_answer(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    """Half an emoji as raw bytes (not valid UTF-8) made json.loads throw the whole answer away:
    "The model call failed: UnicodeDecodeError", not retried. A content sent as one part without its
    list reached the user as a Python repr."""
    config, _ = make_config(**{"agents.defaults.llmMaxRetries": 0})
    runtime = make_runtime(config)
    completion = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Tea time @ at five"},
                               "finish_reason": "stop"}]}
    raw = json.dumps(completion).encode().replace(b"@", b"\xf0\x9f")
    part = {"type": "text", "text": "Hello there"}
    bom = b"\xef\xbb\xbf" + json.dumps(completion).replace("@", "again").encode()  # read before; a review catch
    fake_llm.push(Reply(raw_body=raw), Reply(content=part), Reply(raw_body=bom))  # type: ignore[arg-type]
    try:
        first = await runtime.ask("when?", session_key="telegram:4")
        second = await runtime.ask("hi", session_key="telegram:4")
        third = await runtime.ask("and?", session_key="telegram:4")
    finally:
        await runtime.aclose()
    assert first == "Tea time \ufffd at five"
    assert second == "Hello there"
    assert third == "Tea time again at five"


async def test_a_model_without_tool_support_answers_without_tools(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    """Switched to a model without tool support (Ollama: "does not support tools"), every turn failed
    with "rejected the request (HTTP 400)" and the reason only in the log."""
    config, _ = make_config(**{"agents.defaults.llmMaxRetries": 0})
    runtime = make_runtime(config)

    def ollama(body: dict[str, Any]) -> Reply:
        if body.get("tools"):
            return Reply(status=400, error_message="registry.ollama.ai/library/gemma:2b does not support tools")
        if "forbidden" in json.dumps(body["messages"]):
            return Reply(status=400, error_message="max_tokens is too large: 8192\nsecond line")
        return Reply(content="fine without tools")

    fake_llm.responder = ollama
    try:
        first = await runtime.ask("hello", session_key="telegram:6")
        second = await runtime.ask("and again", session_key="telegram:6")
        refused = await runtime.ask("forbidden", session_key="telegram:6")
        turns = len(fake_llm.requests)
        # the memory work asks such a model in plain text too (a forced save_session_note tool call
        # would fail every time, the transcript only raw-archived)
        fake_llm.responder = lambda body: (
            Reply(status=400, error_message="model does not support tools") if body.get("tools")
            else Reply(content="The user greeted the assistant and asked it the same thing twice.")
        )
        assert await runtime.agent.new_session("telegram:6")
        assert await runtime.agent.drain(30)
    finally:
        await runtime.aclose()
    assert first == second == "fine without tools"
    assert [bool(r.get("tools")) for r in fake_llm.requests[:turns]] == [True, False, False, False]
    assert refused.endswith("rejected the request (HTTP 400): max_tokens is too large: 8192 second line")
    assert not any(r.get("tools") for r in fake_llm.requests[turns:])
    notes = [p for p in (config.workspace_path / "memory").glob("????-??-??-*.md")]
    assert notes and "greeted the assistant" in notes[0].read_text()


async def test_repeated_tool_call_ids_are_made_unique(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    """Two calls with one id in a reply, and "call_0" in every reply of servers that send none, went
    back to the model as they came: its results could not be told apart, and a provider that refuses
    repeated ids refused every later request of the session."""
    config, _ = make_config()
    runtime = make_runtime(config)
    listing = {"id": "dup", "name": "list_dir", "arguments": {"path": "."}}
    fake_llm.push(
        Reply(content=None, tool_calls=[listing, listing]),
        Reply(content=None, tool_calls=[{"id": "dup", "name": "list_dir", "arguments": {"path": "."}}]),
        Reply(content="done"),
    )
    try:
        assert await runtime.ask("look around", session_key="telegram:5") == "done"
    finally:
        await runtime.aclose()
    last = fake_llm.requests[-1]["messages"]
    ids = [c["id"] for m in last if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    results = [m["tool_call_id"] for m in last if m["role"] == "tool"]
    assert len(ids) == 3 and len(set(ids)) == 3 and sorted(results) == sorted(ids)
    stored = [c["id"] for m in messages_of(session_path(config, "telegram:5")) for c in m.get("tool_calls") or []]
    assert len(set(stored)) == 3


async def test_an_answer_cut_at_the_output_limit_says_so(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    """finish_reason "length" was ignored: the user got half a sentence as the whole answer, and a
    tool call cut off mid-arguments got only a JSON error, so the model sent it again, cut again."""
    config, _ = make_config()
    runtime = make_runtime(config)
    fake_llm.push(
        Reply(content="This answer was cut in the mi", finish_reason="length"),
        Reply(content=None, finish_reason="length",
              tool_calls=[{"name": "write_file", "arguments": '{"path": "essay.md", "content": "Once upon a ti'}]),
        Reply(content="I will write it in parts."),
    )
    try:
        cut = await runtime.ask("tell me everything", session_key="telegram:3")
        await runtime.ask("write the essay", session_key="telegram:3")
    finally:
        await runtime.aclose()
    assert cut.startswith("This answer was cut in the mi") and "cut off" in cut and "maxTokens" in cut
    # the note is the user's: the model's next prompt holds its own words only (it repeated the note)
    replayed = [m for m in fake_llm.requests[-1]["messages"] if m["role"] == "assistant"]
    assert replayed[0]["content"] == "This answer was cut in the mi"
    assert not any("cut off here" in str(m.get("content")) for m in fake_llm.requests[-1]["messages"])
    tool_result = fake_llm.requests[-1]["messages"][-1]
    assert tool_result["role"] == "tool" and "invalid arguments" in tool_result["content"]
    assert "output limit" in tool_result["content"] and "smaller pieces" in tool_result["content"]


async def test_a_model_that_keeps_sending_the_cut_call_is_stopped(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    """Told to split it, a model sent the same cut call again: 41 requests to the iteration limit."""
    config, _ = make_config()
    runtime = make_runtime(config)
    cut = Reply(content=None, finish_reason="length",
                tool_calls=[{"name": "write_file", "arguments": '{"path": "essay.md", "content": "Once upon'}])
    fake_llm.push(*[cut] * 10)
    try:
        answer = await runtime.ask("write the essay", session_key="telegram:4")
    finally:
        await runtime.aclose()
    assert len(fake_llm.requests) == 3 and "cut off at the output limit" in answer, (len(fake_llm.requests), answer)


async def test_only_real_images_go_to_a_vision_model_and_files_stay_known(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    """A vision model got anything named like an image (an SVG, a TIFF, text named .png): refused by
    the endpoint, and the model never learnt the file's path. A file sent in one turn was unknown in
    the next (its note was not saved: "the contract I sent earlier")."""
    from nanobot.bus.events import InboundMessage

    config, _ = make_config()
    runtime = make_runtime(config)
    media = config.workspace_path / "media"
    media.mkdir(parents=True, exist_ok=True)
    png = media / "telegram_5_1_photo.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    fake_png = media / "telegram_5_2_notes.png"
    fake_png.write_text("this is plain text, not a PNG")
    svg = media / "telegram_5_3_drawing.svg"
    svg.write_text("<svg xmlns='http://www.w3.org/2000/svg'/>")
    contract = media / "telegram_5_4_contract.pdf"
    contract.write_bytes(b"%PDF-1.4")
    built = runtime.agent.context.user_message("look", "rt", [str(png), str(fake_png), str(svg)], vision=True)
    parts = built["content"]
    images = [p["image_url"]["url"][:22] for p in parts if p["type"] == "image_url"]
    assert images == ["data:image/png;base64,"], images
    text = parts[0]["text"]
    assert f"[attached file: {fake_png}" in text and f"[attached file: {svg}" in text
    try:
        runtime.loop.start()
        await runtime.bus.request(InboundMessage("telegram", "5", "5", "", media=[str(contract)]))
        await runtime.ask("please summarise the contract I sent earlier", session_key="telegram:5")
    finally:
        await runtime.aclose()
    history = fake_llm.requests[-1]["messages"]
    earlier = [m for m in history[1:-1] if m["role"] == "user"]
    assert earlier and str(contract) in earlier[0]["content"], earlier


async def test_a_model_that_refuses_images_answers_with_them_described(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    """gemma3:4b is a vision model and its 1B sibling is not; a photo to a model the name took for a
    vision model failed the whole turn (HTTP 400), the question never answered."""
    from nanobot.bus.events import InboundMessage
    from nanobot.providers.vision import model_supports_vision

    assert model_supports_vision("gemma3:4b", "custom") and not model_supports_vision("gemma3:1b", "custom")
    config, _ = make_config(**{"agents.defaults.model": "vision-looking-but-not", "agents.defaults.llmMaxRetries": 0})
    runtime = make_runtime(config)
    runtime.agent.provider.supports_vision = lambda: True  # what the name said
    media = config.workspace_path / "media"
    media.mkdir(parents=True, exist_ok=True)
    png = media / "telegram_5_1_photo.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)

    def text_only(body: dict[str, Any]) -> Reply:
        if any(isinstance(m.get("content"), list) for m in body["messages"]):
            return Reply(status=400, error_message="this model does not support image input")
        return Reply(content="an answer from the words")

    fake_llm.responder = text_only
    try:
        runtime.loop.start()
        first = await runtime.bus.request(InboundMessage("telegram", "5", "5", "what is this?", media=[str(png)]))
        asked = len(fake_llm.requests)
        second = await runtime.bus.request(InboundMessage("telegram", "5", "5", "and this?", media=[str(png)]))
    finally:
        await runtime.aclose()
    assert first is not None and first.content == "an answer from the words"
    assert "[an attached image: not shown" in json.dumps(fake_llm.requests[asked - 1]["messages"])
    assert second is not None and second.content == "an answer from the words"
    # from then on the photo goes as its note (with its path) at once: no refused request first
    later = fake_llm.requests[asked:]
    assert later and not any(isinstance(m.get("content"), list) for r in later for m in r["messages"])
    assert str(png) in json.dumps(later[0]["messages"])


def test_an_album_of_big_photos_stays_within_one_requests_size(make_config) -> None:  # noqa: ANN001
    """Each photo was checked against the 5 MB cap on its own: a 10-photo album of 4.9 MB each
    went out as one 65 MB request, which providers refuse (HTTP 413), and the turn failed."""
    from nanobot.agent.context import IMAGES_MAX_TOTAL_BYTES

    config, _ = make_config()
    runtime = make_runtime(config)
    media = config.workspace_path / "media"
    media.mkdir(parents=True, exist_ok=True)
    photos = []
    for n in range(10):
        photo = media / f"telegram_5_{n}_photo.png"
        photo.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes([n]) * 4_900_000)
        photos.append(str(photo))
    built = runtime.agent.context.user_message("look at these", "rt", photos, vision=True)
    parts = built["content"]
    shown = [p for p in parts if p["type"] == "image_url"]
    sent_bytes = sum(len(p["image_url"]["url"]) for p in shown) * 3 // 4
    assert len(shown) == 3 and sent_bytes <= IMAGES_MAX_TOTAL_BYTES * 1.01
    text = parts[0]["text"]
    assert all(f"[attached file: {p}" in text for p in photos[3:])  # the rest are named, not lost
    assert text.count("not shown: this message's images are over 15 MB together") == 7


async def test_a_command_with_a_file_says_the_file_was_not_read(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    """A document captioned `/new` or `/help`: the command was done and the file kept in media/,
    unread, without a word to the user."""
    from nanobot.bus.events import InboundMessage

    config, _ = make_config()
    runtime = make_runtime(config)
    media = config.workspace_path / "media"
    media.mkdir(parents=True, exist_ok=True)
    scan = media / "telegram_5_9_scan.pdf"
    scan.write_bytes(b"%PDF-1.4")
    try:
        runtime.loop.start()
        for command, answer in (("/help", "/new"), ("/new", "New session started.")):
            out = await runtime.bus.request(InboundMessage("telegram", "5", "5", command, media=[str(scan)]))
            assert out is not None and answer in out.content
            assert "Attached telegram_5_9_scan.pdf: kept in media/ but not read" in out.content, out.content
        plain = await runtime.bus.request(InboundMessage("telegram", "5", "5", "/help"))
        assert plain is not None and "Attached" not in plain.content
    finally:
        await runtime.aclose()
    assert not fake_llm.requests  # commands, no model turn
