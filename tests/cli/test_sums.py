"""cli.studies.sums: the calculations found in an answer, and the CLI over an answers file on the test model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from cli.studies.sums import calculations
from tests.fixtures_model import tiny_model_path  # noqa: F401 - session fixture


def test_calculations_find_each_result_and_the_words_before_it() -> None:
    answer = ("First, 5 * 5 = **25**. Then 69 + 25 is 94, and 94 - 18 comes to 76. Also 4 x 7 gives 29. "
              "But 3 - 9 = 6 is left out.")
    found = calculations(answer)
    assert [c.result for c in found] == [25, 94, 76, 28]  # 4 x 7 is 28 whatever the answer wrote; 3 - 9 < 0 skipped
    assert found[0].prefix == "First, 5 * 5 = **"
    assert found[1].prefix.endswith("69 + 25 is ")
    assert found[2].prefix.endswith("94 - 18 comes to ")
    assert found[3].prefix.endswith("4 x 7 gives ")
    assert calculations("So the answer is 12 apples.") == []


def test_sums_cli_scores_each_model_on_the_same_words(tiny_model_path, tmp_path: Path) -> None:  # noqa: ANN001, F811
    rows = {"run": ["r-s0", "r-s0", "r-s0", "other"], "phase": ["after", "after", "before", "after"],
            "problem_id": ["p1", "p2", "p1", "p1"],
            "prompt": ["Lily had 45 marbles and gave 27 away. How many are left?",
                       "Sam buys 4 mugs for $13 each. How much does he spend?", "x", "x"],
            "answer": ["First, 45 - 27 = 18. So the answer is 18 marbles.",
                       "4 * 13 = 52, then 52 + 0 is 52. The answer is $52.", "1 + 1 = 2", "2 + 2 = 4"]}
    path = tmp_path / "answers.parquet"
    pq.write_table(pa.table(rows), path)
    argv = [sys.executable, "-m", "cli.studies.sums", str(path), "r-s0", str(tiny_model_path), str(tiny_model_path)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    first, second = json.loads(out.stdout)
    assert first["calculations"] == 3  # the run's two "after" answers: 45 - 27, 4 * 13 and 52 + 0
    assert 0.0 < first["p_right"] < 1.0 and 0.0 <= first["greedy_right"] <= 1.0
    assert {k: v for k, v in first.items() if k != "model"} == {k: v for k, v in second.items() if k != "model"}
    missing = subprocess.run([*argv[:4], "nobody", str(tiny_model_path)], capture_output=True, text=True, timeout=120)
    assert missing.returncode != 0 and "no after answers of run 'nobody'" in missing.stderr
