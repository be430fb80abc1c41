"""Cold start of `nanobot agent -m hi` against a 0 ms fake LLM, and what dominates it.

The HTTP fake LLM runs in a thread of this process; each run is a fresh `python -m nanobot agent -m hi`
in an onboarded home. Prints the median wall time over `--runs`, the same for bare `python -c pass`
and `import litellm` for reference, and the slowest top-level imports from one `-X importtime` run.

    .venv/bin/python benchmarks/cold_start.py [--runs 7]

Target: median under 2.5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.conftest import config_dict  # noqa: E402
from tests.fakes.llm_server import FakeLLMServer  # noqa: E402

TARGET_S = 2.5
TOP_IMPORTS = 12


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")}
    env.update({"NANOBOT_HOME": str(home), "PYTHONPATH": str(REPO), "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    return env


def _timed(args: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    done = subprocess.run(
        args, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120
    )
    return time.perf_counter() - start, done


def _median(args: list[str], env: dict[str, str], runs: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(runs):
        elapsed, done = _timed(args, env)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}")
        times.append(elapsed)
    return statistics.median(times), times


def top_imports(stderr: str, limit: int) -> list[tuple[int, str]]:
    """Top-level (and second-level) imports by cumulative microseconds from -X importtime output."""
    rows = []
    for line in stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if match and len(match.group(3)) <= 3:  # depth 0 or 1
            rows.append((int(match.group(2)), match.group(3) + match.group(4)))
    return sorted(rows, reverse=True)[:limit]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer() as server:
        home = Path(tmp)
        (home / "config.json").write_text(json.dumps(config_dict(server.url)), encoding="utf-8")
        env = _env(home)
        subprocess.run([py, "-m", "nanobot", "onboard"], env=env, capture_output=True, check=True)
        _timed([py, "-m", "nanobot", "agent", "-m", "hi"], env)  # warm the OS file cache / .pyc files
        bare, _ = _median([py, "-c", "pass"], env, args.runs)
        lite, _ = _median([py, "-c", "import litellm"], env, args.runs)
        cold, times = _median([py, "-m", "nanobot", "agent", "-m", "hi"], env, args.runs)
        _, traced = _timed([py, "-X", "importtime", "-m", "nanobot", "agent", "-m", "hi"], env)
        print(f"python -c pass:              median {bare:.2f} s")
        print(f"python -c 'import litellm':  median {lite:.2f} s")
        print(
            f"nanobot agent -m hi:         median {cold:.2f} s over {args.runs} runs "
            f"(min {min(times):.2f}, max {max(times):.2f}); target < {TARGET_S} s "
            f"{'PASS' if cold < TARGET_S else 'FAIL'}"
        )
        print(f"slowest imports in one run (cumulative, -X importtime; top {TOP_IMPORTS}):")
        for micros, name in top_imports(traced.stderr, TOP_IMPORTS):
            print(f"  {micros / 1e6:6.2f} s  {name}")
        return 0 if cold < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
