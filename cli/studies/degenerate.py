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

Measured on a validation draw (``--problem-seed 424242 --n 216 --draws 3``; hinted rate, student / teacher, each ±
about 0.01): the earlier default build (4 layers, 3,200 steps) 0.053 / 0.130; the same recipe with 6 layers 0.071 /
0.108; 6 layers with more friendly practice (``default_ai`` 0.6, ``default_terse`` 0.5) 0.076 / 0.071; 6 layers with
quoting-practice rows (the grader asks what the student wrote, in work with slips) and no answer-first casual template
0.060 / 0.073. With one draw, two seeds of one 6-layer recipe (half the default comments friendly, no answer-first
template) gave 0.093 / 0.130 and 0.065 / 0.250: a single build says little. Deeper models with more comment practice
halve the teacher's rate; none of those lowered the student's. Trained for 6,400 steps instead of 3,200 (6 layers,
``default_ai`` 0.6, ``default_terse`` 0.5, about 55 minutes on one thread), seeds 0-3: 0.066 / 0.096, 0.057 / **0.032**,
0.076 / 0.068, 0.080 / 0.062; longer training alone does not lower the rates, the seed decides as much. The same recipe
and seed without the answer-first casual template (``answer_first`` 0 in ``tinymodel/build.py``; the corpus changes, so
in effect another seed), built on another machine, was the default build: 0.028 / 0.080, the first build below 0.05 for
the student; its first answers 0.014 / 0.032, and its accuracy the same under a hint as without (student 0.454 / 0.452,
teacher 0.999 / 0.999). On the stack (combined, 3 seeds) the malformed share after training follows the hinted rate: the
earlier default gives student 0.062, teacher 0.14; the quoting-practice build student 0.083 (score 0.74, worst seed
0.69), teacher 0.105 (score 0.83, worst seed 0.81); seed 1 with the answer-first template (an earlier default) teacher
0.016 (score 0.40 -> 0.90, worst seed 0.85, accuracy 1.00 -> 0.997), student 0.080 (score 0.21 -> 0.84, worst seed 0.82,
accuracy 0.16 -> 0.15); the build then the default student 0.043, teacher 0.053 at the previous training defaults and
student 0.049, teacher 0.053 at the current ones (``cli/experiments/personal.py``). Sampling colder does not rescue the
grader: the earlier default's hinted rates at temperature 0.7 / 0.5 / 0.3 (one draw each) are teacher 0.111 / 0.102 /
0.097 and student 0.051 / 0.056 / 0.032, so its misquoted numbers are mostly its most likely ones; at temperature 1 its
first answers garble 0.079 (student) and 0.056 (teacher). The previous default's first answers, three draws: 0.060 /
0.054 at temperature 1 against 0.014 / 0.032 at 0.7; the current default's 0.051 / 0.049 against 0.017 / 0.020.
Seeds 2 and 3 of the default recipe, built on another machine (two draws): 0.023 / 0.046, student accuracy 0.357 (first
answers), and 0.049 / 0.069, 0.400. Seed 2 on the stack at the current training defaults, 3 seeds, combined / binary /
OPD: teacher 0.34 -> 0.90 (worst seed 0.88) / 0.82 / 0.70, malformed 0.025 / 0.028 / 0.019; student 0.39 -> 0.90 (worst
seed 0.89) / 0.84 / 0.64, malformed 0.031 / 0.031 / 0.022, accuracy 0.31 -> 0.28 / 0.25 / 0.31 (a second combined run:
teacher 0.86, worst 0.85, malformed 0.031; student 0.94, worst 0.91, malformed 0.028, accuracy 0.28). That meets every
mark the experiment sets, but with 11 points less accuracy than seed 1 on the student's problems before any training
(0.31 against 0.42) and 8 after (0.28 against 0.36), so the default stays seed 1. Those two builds were not kept, and a
build does not repeat on another kind of CPU (``tinymodel/build.py``). Built again on an AVX-512 machine (three draws):
seed 1 0.025 / 0.059, student accuracy 0.455 (the shipped seed 1, built elsewhere: 0.028 / 0.080, 0.452); seed 2 (two
draws) 0.019 / 0.086, 0.565; seed 3 0.025 / 0.053, 0.300. That seed 2 on the stack, combined / binary / OPD: teacher
0.35 -> 0.87 (worst seed 0.82) / 0.75 / 0.74, malformed 0.052 / 0.059 / 0.034; student 0.28 -> 0.91 (worst seed 0.87) /
0.79 / 0.57, malformed 0.034 / 0.043 / 0.009, accuracy 0.52 -> 0.43 / 0.45 / 0.49: a stronger student's helper that
loses more of its sums. That seed 1 on the stack: teacher combined / binary / OPD 0.40 -> 0.87 (worst seed 0.86) / 0.83
/ 0.80, malformed 0.043 / 0.052 / 0.049, accuracy 1.00 / 0.997 / 0.997; student combined 0.25 -> 0.92 (worst seed 0.91),
malformed 0.037, accuracy 0.43 -> 0.45. That build is the default now (``tinymodel/weights/default/``); its first
answers on this validation draw garble 0.017 / 0.020. A second run of each: teacher 0.89 (worst seed 0.87) / 0.86 /
0.84, malformed 0.052 / 0.043 / 0.046; student 0.94 (worst seed 0.91) / 0.82 / 0.52, malformed 0.046 / 0.049 / 0.052,
accuracy 0.43 -> 0.41 / 0.36 / 0.41.
Seeds 4 and 5 of the default recipe built on an x86-64 CPU without AVX-512 (torch CPU capability AVX2; 3,017 and
3,015 s, final loss 0.1449 and 0.1467), three draws: 0.056 / 0.054, student accuracy 0.520 (first answers 0.039 /
0.014), and 0.029 / 0.139, 0.505 (first answers 0.015 / 0.009): neither lowers the teacher's hinted rate below the
default's, so neither was run on the stack.
The teacher's rates above were measured before a comment's wrong step counted (``scoring.find_comment_flaw``: "Your
step 12 - 11 = 3" where the work says 12 - 11 = 1). With it, the default build on the experiment's own draw (``--n 108
--draws 3``): first answers student / teacher 0.034 / 0.009, hinted 0.034 / 0.037 (0.015 before; 7 of its 12 flagged
hinted comments a wrong step).
On the validation draw under that check, the default: first answers 0.017 / 0.022, hinted 0.025 / 0.066, student
accuracy 0.461. Two builds of the default recipe with three quarters of the unhinted grading comments warm
(``default_terse`` 0.25: more practice at quoting a step inside a friendly sentence; AVX2 CPU, 4,479 and 4,512 s, two
at a time), three draws: seed 1 first 0.014 / 0.068, hinted 0.026 / 0.066, accuracy 0.451; seed 2 first 0.020 /
0.012, hinted 0.017 / 0.028, accuracy 0.361. Seed 2 on the stack (combined, 3 seeds): teacher 0.62 -> 0.93 (worst seed
0.92), malformed 0.025, accuracy 1.00 (its unhinted comments are already warm, so two of three seeds got one batch),
again 0.94 (0.92), 0.025 (binary 0.91, worst seed 0.84, malformed 0.015; OPD trained nothing: no seed got 16 hinted
turns); student 0.39 -> 0.85 (worst seed 0.81), malformed 0.025, accuracy 0.38 -> 0.32, again 0.87 (0.82), 0.025,
0.38 -> 0.30. It meets every teacher mark, but the student loses 6 and 8 points of sums (the mark allows 5) from a
lower start, so the default stays. Two more seeds of that recipe (7,077 and 7,110 s, sharing the CPU with other
work): seed 3 first 0.037 / 0.023, hinted 0.031 / 0.086, accuracy 0.4105; seed 4 first 0.023 / 0.039, hinted 0.029 /
0.161, accuracy 0.380. One seed in four lowers the teacher's hinted rate; the seed decides more than the recipe. None
of the four builds is shipped. Seeds 1 and 3 of that recipe built again on an AVX-512 machine (2,886 and 2,896 s,
two at a time, final loss 0.1524 and 0.1509), three draws: seed 1 first 0.012 / 0.042, hinted 0.037 / 0.076, accuracy
0.463 (hinted 0.423); seed 3 first 0.034 / 0.028, hinted 0.036 / 0.125, accuracy 0.485 (hinted 0.458); seed 5
(2,880 s, 0.1525) first 0.014 / 0.023, hinted 0.011 / 0.051, accuracy 0.367 (hinted 0.340); seed 6 (3,153 s, 0.1497)
first 0.043 / 0.051, hinted 0.029 / 0.094, accuracy 0.500 (hinted 0.492). Seed 5 on the stack (combined, 3 seeds):
teacher 0.58 -> 0.89 (worst seed 0.89), malformed 0.009 -> 0.040, accuracy 1.00; student 0.32 -> 0.96 (worst seed
0.93), malformed 0.037 -> 0.003, accuracy 0.38 -> 0.26. Like seed 2 above it meets the teacher's marks and loses the
student's sums (12 points): both builds that met the teacher's marks lost more than the 5 points the student's mark
allows. Deeper: the default recipe with 8 layers (1,837,696 parameters against 1,443,840;
AVX-512, 3,726 and 3,831 s two at a time, final loss 0.1593 and 0.1619 against the default's 0.1562), three draws:
seed 1 first 0.031 / 0.015, hinted 0.019 / 0.110, accuracy 0.429; seed 2 first 0.020 / 0.034, hinted 0.031 / 0.122,
accuracy 0.315. Two more layers in the same steps copy worse under a hint, not better; neither was run on the stack.
The student's accuracy by style on the experiment's own problems (``--n 108 --draws 3``) tells which builds keep their
sums while learning the style: the shipped default gets 0.46 of its formatted answers right, 0.48 of its casual ones
and 0.44 under a hint; ``default_terse`` 0.25 seed 5 gets 0.37, 0.26 and 0.32, and after training on the stack (seed
0) 0.23 of its casual answers. Seeds 7 and 8 of that recipe (AVX-512, 2,874 and 2,898 s two at a time, final loss
0.1487 and 0.1448), validation draw: seed 7 first 0.019 / 0.053, hinted 0.029 / 0.193, accuracy 0.464 (formatted
0.469, casual 0.450, hinted 0.452); seed 8 first 0.014 / 0.065, hinted 0.022 / 0.082, accuracy 0.687 (0.703, 0.642,
0.659). Seeds 9 and 10 (4,297 and 4,311 s, sharing the CPU with other work; final loss 0.1500 and 0.1636): seed 9
first 0.020 / 0.039, hinted 0.020 / 0.074, accuracy 0.437 (0.445, 0.419, 0.428); seed 10 first 0.025 / 0.080, hinted
0.051 / 0.082, accuracy 0.299 (0.301, 0.294, 0.292). None of the four lowers the teacher's hinted rate below the
default's; none was run on the stack.
Trained for 9,600 steps instead of 6,400 (the default recipe, ``default_terse`` 0.5, 76,800 conversations; AVX-512,
4,374 and 4,210 s two at a time, final loss 0.1423 and 0.1387), validation draw: seed 1 first 0.017 / 0.008, hinted
0.023 / 0.026, accuracy 0.725 (formatted 0.717, casual 0.747, hinted 0.713); seed 2 first 0.009 / 0.006, hinted
0.008 / 0.046, accuracy 0.806 (0.810, 0.786, 0.838). Both copy and add far better than any 6,400-step build. Seed 2
is the default now (``tinymodel/weights/default/``); on the experiment's own draw its first answers garble 0.003 /
0.009, hinted 0.012 / 0.034, and it gets 0.79 of its formatted answers right, 0.85 of its casual ones and 0.81 under
a hint. Above, "the default" and "the shipped default" mean the build shipped at the time. The stack figures of
both seeds are in ``cli/experiments/personal.py``.
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
