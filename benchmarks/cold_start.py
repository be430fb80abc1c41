"""Cold start of `nanobot agent -m hi` (OpenAI-compatible route) beside `python -c "import litellm"`.

The HTTP fake LLM answers at 0 ms from a thread of this process; each run is a fresh
`python -m nanobot agent -m hi` in an onboarded home whose config points `providers.custom` at the
fake (the direct route, nanobot's own HTTP client). In the same sitting it times bare `python -c pass` and
`python -c "import litellm"`, so the ratio holds however loaded the machine is. Prints the median
and min over `--runs`, each run's peak RSS (from wait4), and the slowest imports of one
`-X importtime` run.

    python benchmarks/cold_start.py [--runs 7]

Goals: median ≤ 1.5 s, ≤ 0.6 × the median `import litellm` of the same run, peak RSS ≤ 150 MiB.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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

GOAL_WALL_S = 1.5
GOAL_RATIO = 0.6
GOAL_PEAK_RSS_MIB = 150.0
TOP_IMPORTS = 15


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{platform.node()}: {os.cpu_count()} cores, {model}, Python {platform.python_version()}, load {load:.1f}"


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")}
    env.update({"NANOBOT_HOME": str(home), "PYTHONPATH": str(REPO), "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    return env


def timed(args: list[str], env: dict[str, str]) -> tuple[float, float, str, str]:
    """(wall seconds, peak RSS MiB, stdout, stderr) of one run; exits on failure."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}): {stderr[-2000:]}")
    return wall, usage.ru_maxrss / 1024, stdout, stderr


def series(args: list[str], env: dict[str, str], runs: int) -> tuple[list[float], list[float]]:
    walls, rss = [], []
    for _ in range(runs):
        wall, peak, _, _ = timed(args, env)
        walls.append(wall)
        rss.append(peak)
    return walls, rss


def top_imports(stderr: str, limit: int) -> list[tuple[int, str]]:
    """Top-level (and second-level) imports by cumulative microseconds from -X importtime output."""
    rows = []
    for line in stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if match and len(match.group(3)) <= 3:  # depth 0 or 1
            rows.append((int(match.group(2)), match.group(3) + match.group(4)))
    return sorted(rows, reverse=True)[:limit]


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    py = sys.executable
    agent = [py, "-m", "nanobot", "agent", "-m", "hi"]
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer() as server:
        home = Path(tmp)
        (home / "config.json").write_text(json.dumps(config_dict(server.url)), encoding="utf-8")
        env = _env(home)
        subprocess.run([py, "-m", "nanobot", "onboard"], env=env, capture_output=True, check=True)
        _, _, reply, _ = timed(agent, env)  # warms the OS file cache and .pyc files
        assert reply.strip() == "ok", reply
        lite_warm = timed([py, "-c", "import litellm"], env)  # same for litellm's files
        del lite_warm
        print(f"machine: {machine()}")
        # interleaved, so a change in machine load hits both series alike
        bare, cold, cold_rss, lite, lite_rss = [], [], [], [], []
        for _ in range(args.runs):
            bare.append(timed([py, "-c", "pass"], env)[0])
            wall, peak, _, _ = timed(agent, env)
            cold.append(wall)
            cold_rss.append(peak)
            wall, peak, _, _ = timed([py, "-c", "import litellm"], env)
            lite.append(wall)
            lite_rss.append(peak)
        _, _, _, traced = timed([py, "-X", "importtime", *agent[1:]], env)
    med = statistics.median
    ratio = med(cold) / med(lite)
    print(f"python -c pass:             median {med(bare):.2f} s (min {min(bare):.2f})")
    print(
        f"python -c 'import litellm': median {med(lite):.2f} s (min {min(lite):.2f}), "
        f"peak RSS median {med(lite_rss):.0f} MiB"
    )
    print(
        f"nanobot agent -m hi:        median {med(cold):.2f} s (min {min(cold):.2f}, "
        f"max {max(cold):.2f}) over {args.runs} runs"
    )
    checks = [
        (f"cold start median {med(cold):.2f} s ≤ {GOAL_WALL_S} s", med(cold) <= GOAL_WALL_S),
        (f"cold start / import litellm = {ratio:.2f} ≤ {GOAL_RATIO}", ratio <= GOAL_RATIO),
        (
            f"peak RSS median {med(cold_rss):.0f} MiB (max {max(cold_rss):.0f}) ≤ {GOAL_PEAK_RSS_MIB:.0f} MiB",
            med(cold_rss) <= GOAL_PEAK_RSS_MIB,
        ),
    ]
    for text, ok in checks:
        print(f"goal: {text}: {verdict(ok)}")
    print(f"slowest imports in one run (cumulative, -X importtime; top {TOP_IMPORTS}):")
    for micros, name in top_imports(traced, TOP_IMPORTS):
        print(f"  {micros / 1e6:6.2f} s  {name}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
