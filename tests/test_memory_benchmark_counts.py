"""The LoCoMo benchmarks count recall both per evidence turn and per question, as printed.

A tiny LoCoMo-shaped file (not the real data): one question with two evidence turns, of which only
one shares a word with the question. Per turn that is half the evidence, per question the question
is answered. Both scripts run as a user runs them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _data(tmp_path: Path) -> Path:
    conversation: dict = {"speaker_a": "Alice", "speaker_b": "Bob"}
    for n in (1, 2):
        conversation[f"session_{n}_date_time"] = f"1:56 pm on {n} May, 2023"
    conversation["session_1"] = [{"speaker": "Alice", "dia_id": "D1:1", "text": "I adopted a parrot yesterday."}]
    conversation["session_2"] = [{"speaker": "Bob", "dia_id": "D2:1", "text": "Sure thing."}]
    qa = [{"question": "Which parrot was adopted?", "answer": "a parrot", "evidence": ["D1:1", "D2:1"],
           "category": 1}]
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([{"conversation": conversation, "qa": qa}]), encoding="utf-8")
    return path


def _run(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=120,
                          cwd=REPO)
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


def test_reference_counts_per_turn_and_per_question(tmp_path: Path) -> None:
    out = _run("benchmarks/locomo_bm25_reference.py", "--data", str(_data(tmp_path)))
    assert "porter unit@10     per turn 0.500   per question 1.000" in out
    report = json.loads(out[: out.rindex("}") + 1])
    assert report["unit@5"] == 0.5 and report["perQuestion"]["unit@5"] == 1.0
    assert report["questionsWithEvidence"] == 1


def test_memory_search_benchmark_counts_per_turn_and_per_question(tmp_path: Path) -> None:
    out = _run("benchmarks/locomo_retrieval.py", "--modes", "keyword", "--data", str(_data(tmp_path)),
               "--cache-dir", str(tmp_path / "cache"))
    for metric in ("unit@5", "unit@10", "visible@5", "visible@10", "within6000"):
        assert f"keyword {metric:<11} per turn 0.500   per question 1.000" in out
    assert "goals (per evidence turn):" in out
    assert "keyword unit@10     0.500 goal >= 0.92 FAIL" in out
