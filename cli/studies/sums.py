"""Where a trained model's sums go: ``python -m cli.studies.sums ANSWERS RUN MODEL [MODEL ...]``.

For every calculation ``a op b =`` in a run's evaluated answers (``answers.parquet`` of an experiment, phase "after" by
default), each model is given the exact conversation and words up to the ``=`` and scored on the right result: the
probability it puts on the result's tokens (``p_right``) and whether greedy decoding would write it (``greedy_right``).
Run on the base model and on the run's trained checkpoint, the two read the same words, so a difference is what
training did to the sums themselves, apart from the wording it moved the answers to. Prints JSON, one entry per model.

Findings: docs/RESULTS.md, "Where the sums go".
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# "44 + 17 = 61", "4 x 7 is 28", "5 * 5 = **25**", "15 - 6 comes to 9": operands, operator, the words that lead to
# the result, and any bold marker before it
_CALC = re.compile(r"(\d+)\s*([-+*x])\s*(\d+)\s*(=|gives|is|comes to)\s*(\**)")


@dataclass
class Calculation:
    prefix: str  # the answer up to where the result starts
    result: int  # the right result


def calculations(answer: str) -> list[Calculation]:
    """Every ``a op b =`` in ``answer`` with a non-negative right result, and the text that leads to it."""
    out = []
    for m in _CALC.finditer(answer):
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        value = {"+": a + b, "-": a - b, "*": a * b, "x": a * b}[op]
        if value < 0:
            continue
        prefix = answer[:m.end()] if m.group(5) else answer[:m.end(4)] + " "
        out.append(Calculation(prefix, value))
    return out


def score(models: list[Path], prompts_answers: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """``p_right`` and ``greedy_right`` of each model over every calculation in the (prompt, answer) pairs."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(models[0])
    items = []
    for prompt, answer in prompts_answers:
        head = tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                       add_generation_prompt=True)
        for c in calculations(answer):
            items.append((tok(head + c.prefix, add_special_tokens=False)["input_ids"],
                          tok(str(c.result), add_special_tokens=False)["input_ids"]))
    out = []
    for path in models:
        model = AutoModelForCausalLM.from_pretrained(path).eval()
        p_sum = greedy = 0.0
        with torch.no_grad():
            for ctx, target in items:
                logits = model(torch.tensor([ctx + target])).logits[0, len(ctx) - 1:-1].float()
                logp = logits.log_softmax(-1)
                rows = torch.arange(len(target))
                p_sum += float(logp[rows, target].sum().exp())
                greedy += bool((logp.argmax(-1) == torch.tensor(target)).all())
        n = len(items)
        out.append({"model": str(path), "calculations": n, "p_right": round(p_sum / n, 4) if n else None,
                    "greedy_right": round(greedy / n, 4) if n else None})
    return out


def main() -> None:
    import duckdb
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("answers", help="an experiment's answers.parquet")
    parser.add_argument("run", help="the run whose answers are read, e.g. student-...-combined-s0")
    parser.add_argument("models", nargs="+", help="model folders: the base model, the run's checkpoint, ...")
    parser.add_argument("--phase", default="after", help="before, curve or after")
    args = parser.parse_args()
    torch.set_num_threads(1)
    con = duckdb.connect()
    rows = con.execute("SELECT prompt, answer FROM read_parquet(?) WHERE run = ? AND phase = ? ORDER BY problem_id",
                       [args.answers, args.run, args.phase]).fetchall()
    if not rows:
        raise SystemExit(f"no {args.phase} answers of run {args.run!r} in {args.answers}")
    print(json.dumps(score([Path(m) for m in args.models], rows), indent=2))


if __name__ == "__main__":
    main()
