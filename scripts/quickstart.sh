#!/usr/bin/env bash
# README command 1: install nanobot with the embedded demo model into .venv, then chat with it.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
"${PIP[@]}" --require-hashes -r requirements/runtime.lock
# A portable llama.cpp build (AVX2, no -march=native): a native build on a CPU with AMX crashed
# (SIGSEGV) on the first reply, and a native build copied to an older CPU dies of SIGILL.
CMAKE_ARGS="-DGGML_NATIVE=OFF ${CMAKE_ARGS:-}" "${PIP[@]}" --require-hashes --no-deps -r requirements/local-model.lock
"${PIP[@]}" --no-deps -e .
"$VENV/bin/nanobot" onboard
"$VENV/bin/nanobot" agent -m "${1:-Hello! In one sentence, who are you?}"
