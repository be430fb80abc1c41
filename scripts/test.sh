#!/usr/bin/env bash
# README command 2: install the test dependencies into .venv (from the hashed locks) and run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
VENV="$(cd "$VENV" && pwd)"  # absolute, whether given relative or absolute
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
"${PIP[@]}" --require-hashes -r requirements/all.lock
# The embedded model (llama-cpp-python compiles from source the first time, ~4 min on 2 cores).
# A portable llama.cpp build (AVX2, no -march=native): a native build on a CPU with AMX crashed
# (SIGSEGV) on the first reply, and a native build copied to an older CPU dies of SIGILL.
CMAKE_ARGS="-DGGML_NATIVE=OFF ${CMAKE_ARGS:-}" "${PIP[@]}" --require-hashes --no-deps -r requirements/local-model.lock
"${PIP[@]}" --no-deps -e .
export PATH="$VENV/bin:$PATH" VIRTUAL_ENV="$VENV"  # lint_ops.sh and the tests use this environment
ruff check .
python scripts/config_docs.py --check
bash scripts/lint_ops.sh
vulture nanobot scripts/vulture_whitelist.py --min-confidence 80  # dead code
pytest -q -p no:cacheprovider "$@"
