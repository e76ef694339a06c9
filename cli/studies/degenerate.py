"""How often a model's first answers are malformed (``envs.personal.scoring.flaw_of``), without the stack:
``python -m cli.studies.degenerate [MODEL] --n 108``.

The experiment's evaluation (``envs.personal.evaluate``) in miniature: the same held-out problems and opening messages
(``EVAL_SEED``, a fresh simulated user per setting), sampled with plain transformers ``generate``
(``tinymodel.evaluate.sample``) at the evaluation's temperature. ``hinted`` asks each problem once more with a held-out
style hint appended the way OPD's teacher prompt carries it: the style that training moves towards. Prints JSON: per
setting and condition the degenerate rate (with its binomial standard error and, for ``--draws K``, the rate of each of
the K samplings), the task accuracy (``envs.personal.evaluate.is_correct``: the student's final answer, the teacher's
verdict; for the student also split by style, casual (``score_student`` >= 0.8) or formatted), the count per flaw and
the first few flagged answers with their reasons.

Findings, builds compared and the commands: docs/RESULTS.md, "Malformed answers".
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

from envs.personal import styles as st
from envs.personal.evaluate import EVAL_SEED, heldout_problems, is_correct
from envs.personal.scoring import flaw_of, score_student
from envs.personal.users import SimulatedTeacher, make_user
from rlcore.judging import inject_hint

HINTS = {"student": st.STUDENT_HINTS_HELDOUT, "teacher": st.TEACHER_HINTS_HELDOUT}


def measure(path: Path, n: int = 108, temperature: float = 0.7, max_new_tokens: int = 320, examples: int = 5,
            seed: int = 0, problem_seed: int = EVAL_SEED, draws: int = 1) -> dict[str, Any]:
    """``problem_seed`` draws the held-out problems and the users' openings: the experiment's own (``EVAL_SEED``) by
    default; another draws a separate validation set, for choosing between models without looking at the
    experiment's problems. ``draws`` samples every problem that many times (the hint drawn again each time): one draw
    of 216 problems has a standard error of about 0.02 at these rates, as large as most differences between builds."""
    if draws < 1:
        raise ValueError(f"draws must be at least 1, got {draws}")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tinymodel.evaluate import sample

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    problems, rng = heldout_problems(n, problem_seed), random.Random(seed)
    out: dict[str, Any] = {"model": str(path), "problems": n, "problem_seed": problem_seed, "draws": draws,
                           "temperature": temperature}
    for setting in ("student", "teacher"):
        user = make_user(setting, problem_seed)
        teacher = isinstance(user, SimulatedTeacher)
        prompts = [user.opening(p) for p in problems]
        for condition in ("first", "hinted"):
            flagged, per_draw, right = [], [], 0
            by_style: dict[str, list[int]] = {"casual": [0, 0], "formatted": [0, 0]}  # [answers, right]
            for _ in range(draws):
                messages = prompts if condition == "first" else [
                    inject_hint([{"role": "user", "content": m}], rng.choice(HINTS[setting]))[0]["content"]
                    for m in prompts]
                replies = sample(model, tok, messages, temperature, max_new_tokens)
                found = [(p, text, f) for p, (text, _) in zip(problems, replies, strict=True)
                         if (f := flaw_of(setting, text, p, user.work.get(p.id, "") if teacher else "",
                                          user.marks.get(p.id, "") if teacher else ""))]
                flagged += found
                per_draw.append(round(len(found) / n, 4))
                for p, (text, _) in zip(problems, replies, strict=True):
                    ok = is_correct(setting, p, text, user.work.get(p.id, "") if teacher else "")
                    right += ok
                    if not teacher:  # the student's style: reads as written by a student, or not
                        cell = by_style["casual" if score_student(text) >= 0.8 else "formatted"]
                        cell[0], cell[1] = cell[0] + 1, cell[1] + ok
            rate = len(flagged) / (n * draws)
            out[f"{setting}_{condition}"] = {
                "degenerate_rate": round(rate, 4),
                "stderr": round(math.sqrt(rate * (1 - rate) / (n * draws)), 4),
                "per_draw": per_draw,
                "accuracy": round(right / (n * draws), 4),
                **({} if teacher else {"accuracy_by_style": {
                    k: {"answers": a, "accuracy": round(r / a, 4) if a else None} for k, (a, r) in by_style.items()}}),
                "flaws": dict(Counter(f.kind for _, _, f in flagged).most_common()),
                "examples": [{"problem": p.question, "answer": text, "reason": f.reason}
                             for p, text, f in flagged[:examples]]}
    return out


def main() -> None:
    from openclaw_rl.settings import get_settings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=None, help="model folder (default: the configured model_path)")
    parser.add_argument("--n", type=int, default=108, help="held-out problems")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--examples", type=int, default=5, help="flagged answers shown per setting and condition")
    parser.add_argument("--problem-seed", type=int, default=EVAL_SEED,
                        help="draw of held-out problems and openings (default: the experiment's own)")
    parser.add_argument("--draws", type=int, default=1, help="samples per problem and condition (averaged)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)  # small matmuls: one thread is as fast and leaves the other cores alone
    path = Path(args.model) if args.model else Path(get_settings().model_path)
    print(json.dumps(measure(path, args.n, args.temperature, examples=args.examples,
                                  problem_seed=args.problem_seed, draws=args.draws), indent=2))


if __name__ == "__main__":
    main()
