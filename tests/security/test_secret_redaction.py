"""Secrets that a tool stumbles on (a key copied into a workspace file, a variable passed to exec on
purpose) are redacted before the result reaches the LLM, the session file or the chat."""

from __future__ import annotations

import base64
from pathlib import Path

from tests.agent_helpers import make_runtime, messages_of, session_path
from tests.fakes.llm_server import FakeLLMServer, Reply

PROVIDER_KEY = "sk-proj-AbCdEf0123456789xyzLIVEKEY"
TG_TOKEN = "7000001:AAHredactionTokenForTests_abcdefgh"
EMBED_KEY = "embedding-key-5f2e9d1c7b"
ENV_SECRET = "github-pat-11AAAAexampleSecret"


async def test_secrets_in_tool_results_never_reach_llm_session_or_chat(
    make_config,
    fake_llm: FakeLLMServer,
    monkeypatch,  # noqa: ANN001
) -> None:
    monkeypatch.setenv("GITHUB_PAT", ENV_SECRET)  # e.g. for a gh skill, in the daemon's environment
    config, _ = make_config(
        **{
            "providers.openai.apiKey": PROVIDER_KEY,
            "channels.telegram.token": TG_TOKEN,
            "memory.search.embeddingApiKey": EMBED_KEY,
            "tools.exec.env": {"GITHUB_PAT": ENV_SECRET},
            "tools.exec.sandbox": "bwrap",
        }
    )
    runtime = make_runtime(config)
    ws = config.workspace_path
    (ws / "leak.txt").write_text(f"openai={PROVIDER_KEY}\ntelegram={TG_TOKEN}\nembed={EMBED_KEY}\n")
    fake_llm.push(
        Reply(content=None, tool_calls=[{"name": "read_file", "arguments": {"path": "leak.txt"}}]),
        Reply(content=None, tool_calls=[{"name": "exec", "arguments": {"command": "echo pat=$GITHUB_PAT"}}]),
        Reply(content="done"),
    )
    reply = await runtime.ask("show me leak.txt and the token", session_key="cli:direct")
    await runtime.aclose()
    sent_to_llm = repr(fake_llm.requests)
    stored = Path(session_path(config)).read_text()
    for secret in (PROVIDER_KEY, TG_TOKEN, EMBED_KEY, ENV_SECRET):
        assert secret not in sent_to_llm
        assert secret not in stored
        assert secret not in reply
    tool_results = [m["content"] for m in messages_of(session_path(config)) if m["role"] == "tool"]
    assert "openai=***" in tool_results[0] and "pat=***" in tool_results[1]


def test_credentials_that_do_not_say_so_by_name_are_registered(make_config) -> None:  # noqa: ANN001
    """Credentials in MCP server command lines, in URL values under ordinary names, inside an
    Authorization header and in signed URLs: an MCP server's stderr, `exec env` and library request
    lines showed them in clear."""
    from nanobot.secrets import mask, register_config_secrets

    config, _ = make_config(
        **{
            "tools.mcpServers": {
                "pg": {
                    "command": "npx",
                    "args": ["-y", "server-postgres", "postgresql://app:pgArgPass_4711@db/app",
                             "--api-key", "brvArgKey_0815x", "--token=tokFlagValue_42", "SERVICE_SECRET=envArg_99xyz"],
                    "env": {"MYSQL_PWD": "mysqlPwd_777x", "CACHE": "redis://:redisPass_31337@cache:6379/0"},
                },
                "gh": {
                    "url": "http://ghpUserinfoToken_1357abcd@127.0.0.1:9/mcp?sig=sasSignature_2468&v=1",
                    "headers": {"Authorization": "Basic " + base64.b64encode(b"me:basicPw_24680").decode(),
                                "X-Api-Key": "Bearer ghp_0123456789abcdefXYZ"},
                },
            },
            "tools.exec.env": {"REDIS_URL": "redis://:execRedis_5150@127.0.0.1:6379/0"},
        }
    )
    register_config_secrets(config)
    for secret in ("pgArgPass_4711", "brvArgKey_0815x", "tokFlagValue_42", "envArg_99xyz", "mysqlPwd_777x",
                   "redisPass_31337", "ghpUserinfoToken_1357abcd", "sasSignature_2468", "basicPw_24680",
                   "ghp_0123456789abcdefXYZ", "execRedis_5150"):
        assert mask(f"error: {secret} lacks scope") == "error: *** lacks scope", secret
    assert mask("server-postgres --api-key value") == "server-postgres --api-key value"  # names stay


def test_a_logged_traceback_is_masked_whole(tmp_path: Path) -> None:
    """pydantic builds its error text from the input, not from args (an MCP server printing its token
    on stdout); a chained cause kept its own args. A stray stdout line is one log line, not ten."""
    import logging

    from loguru import logger

    from nanobot.logs import route_library_logging, setup_logging
    from nanobot.secrets import register_secret

    register_secret("chainedSecret_12345")
    log_file = tmp_path / "nanobot.log"
    try:
        setup_logging("INFO", file=str(log_file))
        route_library_logging()
        try:
            try:
                raise ValueError("HTTP 401: Incorrect API key provided: chainedSecret_12345")
            except ValueError as exc:
                raise RuntimeError("the provider refused") from exc
        except RuntimeError:
            logger.exception("call failed")
        for _ in range(20):  # a server printing its own log on stdout: one record per line
            try:
                raise ValueError("1 validation error\n  input_value='using token chainedSecret_12345'")
            except ValueError:
                logging.getLogger("mcp.client.stdio").exception("Failed to parse JSONRPC message from server")
        logger.complete()
    finally:
        setup_logging("WARNING", prompts=False)
    text = log_file.read_text(encoding="utf-8")
    assert "Incorrect API key provided: ***" in text and "chainedSecret" not in text, text
    stray = [line for line in text.splitlines() if "JSONRPC" in line]
    assert len(stray) == 5 and "ValueError: 1 validation error" in stray[0], text  # a few a minute
    assert "Traceback" not in text.split("JSONRPC", 1)[1], text  # none for the stray line


def test_the_working_directory_is_not_taken_for_a_password() -> None:
    """`PWD` joined the credential names for `MYSQL_PWD`: the shell's PWD and OLDPWD (the folders the
    daemon started in) were masked in every tool result, log line and file the model read."""
    from nanobot.secrets import mask, register_env_secrets

    folders = {"PWD": "/home/alice-started-here", "OLDPWD": "/srv/alice-before"}
    register_env_secrets({**folders, "MYSQL_PWD": "mysqlPw_4242"})
    text = "cd /home/alice-started-here and /srv/alice-before"
    assert mask(text) == text
    assert mask("password mysqlPw_4242") == "password ***"


def test_a_secret_cut_in_two_is_masked_by_its_pieces() -> None:
    """Output cut by bytes (a page's size limit, a command's kept head and tail) went through a key:
    whole it no longer matched, and 53 of its 54 characters were shown."""
    from nanobot.secrets import mask_cut, register_secret

    key = "sk-cut-0123456789abcdefghijKLMNOP"
    register_secret(key)
    assert mask_cut("output ... " + key[:20], end=True) == "output ... ***"
    assert mask_cut(key[-15:] + " and more", start=True) == "*** and more"
    assert mask_cut("ends with sk-cut-0", end=True) == "ends with ***"  # eight characters are enough
    assert mask_cut("the word sk-cut-", end=True) == "the word sk-cut-"  # seven are not (common words)
    assert mask_cut("no piece here", start=True, end=True) == "no piece here"
    # a URL's or a "Bearer x" value's pieces are ordinary text; their credentials are masked whole
    register_secret("postgres://app:s3cretpw@db:5432/app")
    assert mask_cut("/app/src/main.py:12: error", start=True) == "/app/src/main.py:12: error"
    assert mask_cut("connect to postgres://", end=True) == "connect to postgres://"


def test_token_shapes_nobody_registered_are_masked_in_the_log(tmp_path: Path) -> None:
    """A Telegram bot URL, an OpenAI-style key and a Bearer header logged by a library (httpx logs
    every request URL) before or without any registration: their shape alone hides them."""
    import logging

    from loguru import logger

    from nanobot.logs import route_library_logging, setup_logging

    bot_token = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
    openai_key = "sk-LiveKey0123456789abcdefXYZ"
    bearer = "abcdEFGH1234ijklMNOP5678"
    log_file = tmp_path / "nanobot.log"
    try:
        setup_logging("INFO", file=str(log_file))
        route_library_logging()
        logging.getLogger("httpx").warning(f"HTTP Request: POST https://api.telegram.org/bot{bot_token}/getMe")
        logging.getLogger("openai").warning(f"request with key {openai_key} failed")
        logger.info(f"header Authorization: Bearer {bearer}")
        logger.complete()
    finally:
        setup_logging("WARNING", prompts=False)
    text = log_file.read_text(encoding="utf-8")
    for value in (bot_token, openai_key, bearer):
        assert value not in text, text
    assert "api.telegram.org/bot***/getMe" in text and "Bearer ***" in text, text


def test_a_secret_that_begins_another_leaves_no_tail_in_clear() -> None:
    """A provider key and a longer credential that starts with it (an MCP URL or argument holding
    the key and more): masked shortest first, the longer one's tail was shown."""
    from nanobot.secrets import mask, register_secret

    register_secret("Tok3nAbc12")
    register_secret("Tok3nAbc12-Zq9Xw8Vu7-SECRETTAIL")
    assert mask("auth=Tok3nAbc12-Zq9Xw8Vu7-SECRETTAIL end") == "auth=*** end"
    assert mask("key Tok3nAbc12 only") == "key *** only"


def test_every_credential_in_the_config_is_registered(make_config) -> None:  # noqa: ANN001
    """The web search key, a provider's extra headers, the Telegram proxy's password and a memory
    backend's key: an error page or a library log line echoing one of them showed it in clear."""
    from nanobot.secrets import mask, register_config_secrets

    config, _ = make_config(
        **{
            "tools.web.search.apiKey": "BSAsearchKEY0123456789xyz",
            "providers.openrouter.extraHeaders": {"X-Api-Key": "hdrSECRET0123456789abc"},
            "channels.telegram.proxy": "http://proxyuser:PrOxYpass0123456789@127.0.0.1:3128",
            "memory.backends": {"mem0": {"apiKey": "m0-BACKENDKEY0123456789"}},
        }
    )
    register_config_secrets(config)
    for secret in ("BSAsearchKEY0123456789xyz", "hdrSECRET0123456789abc", "PrOxYpass0123456789",
                   "m0-BACKENDKEY0123456789"):
        assert mask(f"error: request with {secret} failed") == "error: request with *** failed", secret
