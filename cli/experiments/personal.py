"""The personal-agent experiment (the paper's Table 3 / Figure 2) on the real stack: `openclaw-rl experiment personal`.

For each method and seed (a *run*, named ``<experiment>-<method>-s<seed>``):

1. a fresh copy of the base model in the run's folder; the engine restarted on it, the workers and the gateway
   restarted with the run's name and method (``OPENCLAW_RUN``, ``OPENCLAW_METHOD``), so runs never share weights,
   samples, checkpoints or sessions; one Temporal dev server serves every run. (Where the settings have no ``run``
   field, the gateway's sessions always feed run "default"; each run then gets a store of its own under
   ``experiments/<id>/<run>`` instead, and its training run is "default" there.)
2. an API key for the run's simulated user; evaluation before any interaction (``envs.personal.evaluate``: held-out
   problems, first response, side turns that are never trained);
3. the run's ``TrainingWorkflow``; ``interactions`` conversations with the simulated user on train-split problems
   through the gateway (``envs.personal.driver``), an evaluation every ``eval_every`` interactions for the curve;
4. once every session has closed, wait until the run has trained every full batch it can, then evaluate again.

Results: ``experiments/<id>/results.parquet`` in the object store (one row per evaluation; the ``experiments`` view of
``openclaw-rl sql``), ``answers.parquet`` (every evaluated answer), ``curve.png`` (score and accuracy against
interactions, mean and spread over seeds, one line per method) and ``summary.json``. Everything started is stopped at
the end, on error and on Ctrl-C.

The paper trains 4B-32B models with lr 1e-5; the tiny CPU model needs a larger step (``DEFAULT_LR``). While a step
trains, serving goes on: ``max_staleness`` 1 lets the next step use what was answered meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from openclaw_rl.settings import Settings, get_settings
from openclaw_rl.stack import (
    Service,
    Stack,
    engine_service,
    gateway_service,
    port_open,
    stop_pid,
    temporal_service,
    worker_service,
)

# The paper's 1e-5 is for 4-32B models. On the default tiny model (6 layers, 9,600 steps, seed 2; AVX-512), 3 seeds
# (each its own sampling draw of the evaluation), at the defaults below, one run each (score before -> after, worst
# seed, malformed after, accuracy before -> after), 216 held-out problems:
#   student, 36 interactions (48 samples, three full batches: the final batch does not apply): combined 0.24 -> 0.95,
#     0.94, 0.008, 0.83 -> 0.83; again 0.96, 0.94, 0.014, 0.81; binary 0.91, 0.90, 0.019, 0.82; OPD 0.49, 0.40,
#     0.006, 0.82
#   student combined with the curve evaluated every 12 interactions (--eval-every 12): 0.24 -> 0.93, 0.89, 0.014,
#     0.83 -> 0.82
#   teacher, 24 interactions: combined 0.45 -> 0.90, 0.87, 0.017, 1.00 -> 1.00; binary 0.85, 0.83, 0.023, 1.00; OPD
#     0.74, 0.71, 0.019, 1.00; again combined 0.89, 0.88, 0.023, 1.00; 0.90, 0.88, 0.032, 1.00 (one seed got 31
#     samples: a batch of 16, then the 15 left in the final batch); 0.90, 0.87, 0.020, 1.00
# and 108 problems: student combined 0.23 -> 0.93, 0.86, 0.012, 0.82 -> 0.83; 0.95, 0.93, 0.015, 0.78.
# Before the last, smaller step on the samples left over (final_batch), teacher, 24 interactions, 216 problems: with the
# student's credit (binary_credit=words) combined 0.45 -> 0.86, 0.74, 0.031, 1.00 -> 1.00 (its worst seed got 29
# samples and trained one batch of 16, the others 32); binary 0.85, 0.81, 0.025; OPD 0.75, 0.72, 0.016; again combined
# 0.90, 0.87, 0.026; 0.87, 0.79, 0.028 (108 problems: 0.87, 0.87, 0.028). With the paper's credit: combined 0.86,
# 0.77, 0.022 (a seed with 31 samples trained one batch); binary 0.87, 0.84, 0.026; OPD 0.54, 0.43, 0.012 (two
# seeds got 14 and 11 hinted samples and trained nothing).
# The vote's reward on every token (binary_credit=all, the paper's and the teacher's default), 108 problems:
#   student, 36 interactions: combined 0.23 -> 0.92, 0.91, 0.015, 0.82 -> 0.82; 0.95, 0.95, 0.009, 0.81; 0.92, 0.88,
#     0.009, 0.81. --kl-beta 0.1: 0.93, 0.92, 0.015, 0.81; 0.93, 0.92, 0.019, 0.80; 0.94, 0.93, 0.012, 0.76 (binary
#     0.86, 0.75, 0.006, 0.77; OPD 0.52, 0.45, 0.012, 0.80). --batch-size 24 (two updates of 24 instead of three of
#     16): 0.78, 0.66, 0.006, 0.83
#   teacher, 24 interactions: combined 0.46 -> 0.88, 0.86, 0.028, 1.00 -> 1.00; binary 0.82, 0.77, 0.034, 0.98;
#     OPD 0.72, 0.69, 0.022, 1.00; again combined 0.86, 0.82, 0.034. --kl-beta 0.1: 0.84, 0.81, 0.031 (binary 0.81,
#     0.79; OPD 0.62, 0.49); 0.86, 0.80, 0.022
#   cli/studies/sums.py on the student runs' checkpoints (the right result's probability in the trained answers'
#     own words, base model minus trained): about 0.012 on average at binary_credit=all (fifteen seeds at KL 0.05,
#     up to 0.040; nine at KL 0.1 alike), 0.008 at "words" (twelve seeds, at most 0.017); at --batch-size 24 0.002
# Measured with one shared sampling draw for every seed (its before accuracy 0.83, 2.8 points above the base model's
# mean over five draws), binary_credit=all, KL 0.05:
#   student, 36 interactions: combined 0.20 -> 0.95, 0.95, 0.006, 0.83 -> 0.79; binary 0.78, 0.73, 0.000, 0.81;
#     OPD 0.50, 0.45, 0.006, 0.81. Two more runs of combined: 0.94, 0.94, 0.022, 0.77; 0.95, 0.94, 0.012, 0.76.
#     Levers on it, combined, one run each: --kl-beta 0.15 0.92, 0.87, 0.003, 0.80; 0.92, 0.86, 0.015, 0.79 (teacher
#     0.84, 0.82, 0.015; binary 0.85, 0.84); --kl-beta 0.1 0.94, 0.93, 0.025, 0.80; --ppo-epochs 4 0.70, 0.52,
#     0.003, 0.80; --trainer adam_eps=1e-4 0.94, 0.92, 0.006, 0.79 (with each seed's own draw: 0.91, 0.89, 0.009,
#     0.82 -> 0.83); adam_eps=3e-5 0.96, 0.96, 0.000, 0.76
#   teacher, 24 interactions: combined 0.49 -> 0.93, 0.90, 0.025, 1.00 -> 1.00; binary 0.88, 0.88, 0.025, 1.00;
#     OPD 0.60, 0.49, 0.012, 1.00 (two of three seeds got fewer than 16 hinted turns and trained nothing)
# Seed 1 of that recipe: teacher combined 0.38 -> 0.93, 0.92, 0.031, 1.00; student combined 0.29 -> 0.93, 0.92,
# 0.043, 0.70 -> 0.63; --kl-beta 0.1 0.91, 0.88, 0.040, 0.65, again 0.83, 0.80, 0.034, 0.63 (teacher 0.88, 0.86,
# 0.037); --trainer binary_credit=words 0.92, 0.89, 0.040, 0.64: 5 to 8 points of sums lost, so seed 2 is the default.
# What follows was measured on the build before it (6 layers, 6,400 steps, seed 1, no answer-first
# casual answers; sliding window, 65,536 positions, with the tool-call rows; built on an AVX-512 machine), with the
# score counting well-formed answers only, 108 held-out problems, 3 seeds each, at the defaults (lr 1.5e-4, 8 PPO epochs
# per batch, KL 0.05 to the base model, a rejected answer blamed only on the tokens the hinted teacher disfavours):
#   student, 36 interactions: combined 0.25 -> 0.94 (worst seed 0.91), malformed 0.018 -> 0.046, accuracy 0.43 ->
#     0.41; binary 0.82 (worst 0.75, malformed 0.049, accuracy 0.36); OPD 0.52 (worst 0.43, malformed 0.052, accuracy
#     0.41; one batch of 16 trained: only hinted turns make its samples). Two more runs of combined: 0.92 (worst
#     0.91), malformed 0.037, accuracy 0.43 -> 0.45; 0.92 (worst 0.87), malformed 0.040, accuracy 0.42
#   teacher, 24 interactions: combined 0.40 -> 0.89 (worst 0.87), malformed 0.009 -> 0.052, accuracy 1.00 -> 1.00;
#     binary 0.86 (worst 0.85, malformed 0.043); OPD 0.84 (worst 0.82, malformed 0.046). Another run: combined 0.87
#     (worst 0.86), malformed 0.043; binary 0.83 (worst 0.76, malformed 0.052); OPD 0.80 (worst 0.75, malformed
#     0.049). Three more of combined: 0.86 (worst 0.82), malformed 0.056; 0.86 (0.83), 0.046; 0.89 (0.88), 0.052. Over
#     the five combined runs the malformed share is 0.050 (14 to 18 of 324 per run), nearly all a step of the
#     student's work miscopied, on 12 of the 108 problems
# Levers tried on this build, 3 seeds per run (combined: score, worst seed, malformed after; student also accuracy
# after): --kl-beta 0.1, teacher 0.86, 0.82, 0.040; 0.88, 0.82, 0.040; 0.88, 0.85, 0.043 (binary 0.82, malformed
# 0.068; OPD 0.78, 0.037); 0.87, 0.83, 0.052; student 0.91, 0.91, 0.037, 0.34 (one seed at 0.21); 0.88, 0.85, 0.046,
# 0.40 (binary 0.78, OPD 0.53). The teacher's malformed share 0.044 over four runs against the defaults' 0.050, within
# the runs' spread, and one student run lost 9 points of sums, so the default stays 0.05. --trainer
# negative_credit=all (blame every token of a rejected reply, the misquoted number included), teacher: 0.87, 0.85,
# 0.046; 0.87, 0.86, 0.056: no change.
# The simulated teacher naming the step a comment miscopies (envs/personal/users.py: "Their step was 70 - 64 = 6:
# please copy the student's numbers exactly."), so that the hint on those turns, and OPD's teacher, has the right
# number: 2 to 12 of the about 175 judged turns of a 3-seed run get such a hint. Teacher combined, twelve runs: 0.88,
# 0.87, 0.049; 0.88, 0.85, 0.049; 0.88, 0.86, 0.049; 0.91, 0.89, 0.046 (binary 0.85, 0.84, 0.056; OPD 0.84, 0.82,
# 0.037); 0.90, 0.88, 0.052; 0.88, 0.83, 0.043; 0.86, 0.83, 0.049; 0.89, 0.87, 0.052; 0.91, 0.90, 0.040; 0.89, 0.86,
# 0.059; 0.85, 0.84, 0.043; 0.90, 0.88, 0.040: 0.048 (186 of 3,888) against 0.050 (97 of 1,944) over six runs
# before it, within the runs' spread. With it, --lr 1.25e-4: 0.88, 0.86, 0.049; 0.89, 0.88, 0.040; 0.85, 0.81,
# 0.043; --teacher-temperature 0.5 (the hinted teacher sharper on the named number): 0.89, 0.84, 0.037; 0.90, 0.87,
# 0.062; 0.89, 0.87, 0.040; 0.88, 0.87, 0.056; 0.89, 0.86, 0.043; 0.89, 0.87, 0.059: 0.049 (96 of 1,944). No change.
# A comment's wrong step counting as malformed ("Your step 12 - 11 = 3" where the work says 12 - 11 = 1; the simulated
# teacher names the student's step most like it, users.closest_step), teacher, 24 interactions, 3 seeds: combined 0.88,
# 0.86, 0.074 (binary 0.83, 0.80, 0.077; OPD 0.82, 0.82, 0.059); two more of combined 0.88, 0.87, 0.062; 0.87, 0.86,
# 0.065: 0.067 (65 of 972, 15 of them a wrong step; 0.051 without that check). With the step named as for a number from
# nowhere (the one sharing most numbers with the sentence) instead: combined 0.87, 0.85, 0.062 (binary 0.79, 0.70,
# 0.074, accuracy 0.96; OPD 0.68, 0.40, 0.043, one seed with fewer than 16 hinted turns trained nothing); 0.86, 0.84,
# 0.062; 0.87, 0.84, 0.059: 0.061 (59 of 972, 9 a wrong step; 0.051 without the check). Levers at that, combined (score,
# worst seed, malformed): --batch-size 8 --ppo-epochs 4: 0.90, 0.89, 0.065; 0.90, 0.89, 0.065. --trainer clip_eps=0.5:
# 0.90, 0.89, 0.065; 0.90, 0.88, 0.056. --kl-beta 0.1: 0.79, 0.74, 0.071; 0.80, 0.78, 0.056. --lr 1.25e-4: 0.88, 0.87,
# 0.062; 0.86, 0.84, 0.059. --trainer w_binary=0.5 (the vote at half weight beside OPD): 0.85, 0.83, 0.065; 0.87, 0.86,
# 0.068. The base model's comments under a style hint are malformed 3.7% of the time (7 of 12 a wrong step;
# degenerate.py); none of these levers brings the trained share below 0.056.
# A build with more practice at warm comments (default_terse 0.25, seed 2; not shipped, degenerate.py), combined, 3
# seeds: teacher 0.62 -> 0.93 (worst seed 0.92), malformed 0.025, accuracy 1.00; again 0.94, 0.92, 0.025 (binary 0.91,
# 0.84, 0.015; OPD trained nothing, no seed got 16 hinted turns); student 0.39 -> 0.85 (0.81), 0.025, accuracy 0.38 ->
# 0.32; again 0.87 (0.82), 0.025, 0.38 -> 0.30: the teacher's marks met, the student's accuracy mark missed.
# Seed 5 of that recipe (AVX-512), combined, 3 seeds: teacher 0.58 -> 0.89 (worst seed 0.89), malformed 0.040; student
# 0.32 -> 0.96 (0.93), malformed 0.003, accuracy 0.38 -> 0.26. Where the sums go (degenerate.py on the experiment's own
# 108 problems, 3 draws, accuracy by style): that build gets 0.37 of its formatted answers right, 0.26 of its few
# casual ones and 0.32 of its answers under a style hint; after training (seed 0, 2 steps) 0.23 of its casual ones. The
# shipped build: formatted 0.46, casual 0.48, hinted 0.44. So on seed 5 the style alone costs 5 points and the
# training 9 more, where the shipped build loses neither. --trainer binary_credit=words (the vote never reaches a
# digit; a calculation's digits are left to OPD and the KL term) on seed 5: student 0.87 (worst seed 0.76), malformed
# 0.062, accuracy 0.29; teacher 0.91 (0.88), malformed 0.059: on that build the sums were not lost through the digits
# the vote credits, so the default then stayed "all" (the paper's). On the shipped build cli/studies/sums.py shows
# them lost there in part, and "words" is the default (above).
# The default build again, with a sentence dropped for a new one counted as broken (scoring._RESTART), one run each:
# student 0.25 -> 0.94 (worst seed 0.92), malformed 0.037, accuracy 0.43 -> 0.39; teacher 0.40 -> 0.84 (0.80), 0.059.
# The seed-1 build shipped before it (the same recipe and seed built on another kind of CPU, so another model;
# tinymodel/build.py), at the same defaults: student combined 0.27 -> 0.93 (worst 0.88), malformed 0.009 -> 0.031,
# accuracy 0.42 -> 0.36; binary 0.82 (worst 0.79, malformed 0.025, accuracy 0.35); OPD 0.56 (worst 0.47, malformed
# 0.028, accuracy 0.39); teacher combined 0.43 -> 0.90 (worst 0.85), malformed 0.009 -> 0.059; binary 0.84 (worst
# 0.82, malformed 0.062); OPD 0.57 (worst 0.43, malformed 0.025; two of three runs got fewer than 16 hinted turns and
# trained nothing).
# What follows was measured on that build and earlier ones.
# Why these defaults. Without answer-first casual answers the base model works a result out before stating it, so its
# accuracy on the student's problems is 0.42 (the previous default's 0.16), and style training costs it: at the
# previous defaults (lr 1e-4, no KL, every token of a rejected answer blamed) combined reached 0.27 -> 0.83 (worst seed
# 0.79), malformed 0.043, accuracy 0.42 -> 0.35; its casual answers' equations with a wrong result rose from 0.39 to
# 0.43 (an answer trained towards with +1 carries its wrong sums along). Combined, 3 seeds each (score, worst seed,
# malformed after, accuracy after; negative_credit=teacher in all but the first):
#   student, 36 interactions: previous defaults 0.83, 0.79, 0.043, 0.35; negative_credit=teacher 0.88, 0.83, 0.025,
#     0.34; with KL 0.05 0.83, 0.77, 0.015, 0.39; KL 0.1 0.80, 0.74, 0.025, 0.40; KL 0.1 and lr 2e-4 0.92, 0.89, 0.028,
#     0.32; KL 0.2 and lr 2e-4 0.83, 0.79, 0.046, 0.35; KL 0.05 and lr 1.5e-4 (the defaults) 0.89, 0.86, 0.049, 0.39
#   teacher, 24 interactions: previous defaults 0.86, 0.86, 0.053, 1.00; KL 0.05 0.90, 0.88, 0.046, 1.00; KL 0.05 and
#     lr 1.5e-4 (the defaults) 0.88, 0.87, 0.053, 1.00
# The KL term keeps the sums (casual answers' wrong equations 0.39 at KL 0.1, 0.42 at the defaults) at a cost in style
# learnt, which the larger step wins back. The seeds of one run differ by up to 0.16 in score, 0.06 in malformed share.
# Replaying the table's combined runs on their own recorded batches (`experiment replay`, 2 evaluations of the 108
# problems per seed): teacher malformed 0.056 as recorded, 0.051 with AdamW eps 1e-4 (base model 0.009); student
# accuracy 0.46 -> 0.37 as recorded, 0.38 at KL 0.2 (score 0.85 against 0.91), 0.40 at eps 1e-4 (score 0.87). On the
# stack eps 1e-4 gave teacher 0.89 (worst seed 0.88), malformed 0.059, and student 0.86 (worst 0.77), malformed 0.031,
# accuracy 0.42 -> 0.38: no optimiser or KL setting tried moves the teacher's misquotes by more than the noise.
# Where a trained comment misquotes, the base model given the same words before puts most of its probability on the
# wrong token too (14 of 17): the style learnt (quote every step, correct the wrong one) leads into sentences the base
# model gets wrong.
# On the previous default (the same recipe with answer-first casual answers), lr 1e-4, no KL, every token blamed:
#   student, 36 interactions: combined 0.21 -> 0.84 (worst seed 0.82), malformed 0.037 -> 0.080, accuracy 0.16 ->
#     0.15; binary 0.75 (worst 0.69, malformed 0.071, accuracy 0.10); OPD 0.51 (worst 0.43, malformed 0.046; one batch
#     of 16 trained: only hinted turns make its samples)
#   teacher, 24 interactions: combined 0.40 -> 0.90 (worst 0.85), malformed 0.028 -> 0.016, accuracy 1.00 -> 0.997;
#     binary 0.84 (worst 0.82, malformed 0.025); OPD 0.78 (worst 0.75, malformed 0.022)
# On the earlier default (4 layers, 3,200 steps, seed 0):
#   the defaults, student: combined 0.09 -> 0.88 (worst seed 0.83), malformed 0.00 -> 0.06, accuracy 0.05 -> 0.06;
#     binary 0.78 (worst 0.73, malformed 0.06); OPD 0.81 (worst 0.73, malformed 0.05)
#   the same, teacher: combined 0.19 -> 0.74 (worst 0.69), malformed 0.01 -> 0.14, accuracy 1.00 -> 0.99; binary 0.60
#     (malformed 0.21, accuracy 0.90); OPD 0.61 (malformed 0.11)
#   lr 7e-4, 1 epoch (the paper's single update per batch; measured before the pacing waited for judging), student:
#     0.09 -> 0.53 (worst 0.18), malformed 0.09, accuracy 0.11 -> 0.04; teacher: 0.16 -> 0.79 (worst 0.76),
#     malformed 0.20, accuracy 1.00 -> 0.95
# The floor under "malformed": that model's own casual answers misquote a number 5.6% of the time (648 answers
# under a style hint, against 0.6% for its default style); its friendly grading comments 12% (108). OPD's teacher is
# that model under a hint, so training towards the style lands near that rate; fewer, larger updates garble more.
# In a plain loop with the same users, judge and trainer backend (no stack), a larger AdamW epsilon (parameters with
# small gradients move less) did not help at lr 7e-4 and 1 epoch: 1e-5 to 3e-4 traded score for malformed answers along
# the same line; 1e-3 (lr 3e-3) and 1e-2 (lr 3e-2) collapsed to mostly malformed text.
DEFAULT_LR = 1.5e-4
DEFAULT_PPO_EPOCHS = 8
# The OPD teacher's log-probs at temperature T: log_softmax(logits / T) (the paper: 1). OPD moves each token's
# probability towards the teacher's, so at 1 the student inherits the hinted base model's spread, misquoted numbers
# included; below 1 the teacher keeps what it prefers and drops what it only tolerates. Measured at 0.5 against 1:
#   plain loop (`experiment offline`, student, 36 interactions, seeds 0-5): combined malformed 0.074 -> 0.054, score
#     0.90 -> 0.93; teacher, 24 interactions, 3 seeds: 0.71 (malformed 0.27) -> 0.74 (0.24)
#   on the stack (3 seeds): student combined 0.88 (worst 0.83, malformed 0.062) -> 0.91 (worst 0.86, malformed 0.065;
#     seeds 0.019 / 0.046 / 0.130), OPD alone 0.81 -> 0.57; teacher combined 0.74 (0.14) -> 0.73 (0.13), OPD alone
#     0.61 (0.11) -> 0.52 (0.08)
# The stack did not confirm the loop's drop in malformed answers and OPD alone learnt less, so the default stays 1.
# Other levers on the stack, combined only, 3 seeds (score, worst seed, malformed after): each one trades style learnt
# for malformed answers along one line whose floor is the hinted base model's own misquote rate (student 0.056):
#   student, 36 interactions (defaults: 0.88, 0.83, 0.062): --kl-beta 0.1: 0.84, 0.78, 0.056; --kl-beta 0.05 with
#     --teacher-temperature 0.5: 0.88, 0.87, 0.056; clip_eps_high=0.2: 0.92, 0.86, 0.059; --ppo-epochs 4: 0.69,
#     0.61, 0.046
#   teacher, 24 interactions (defaults: 0.74, 0.69, 0.14): --kl-beta 0.1: 0.61, 0.57, 0.10 (binary 0.55, OPD 0.46);
#     --batch-size 8: 0.78, 0.75, 0.20; --batch-size 8 --kl-beta 0.05: 0.79, 0.75, 0.15
#   --trainer negative_credit=teacher (a negative reward blames only the tokens the hinted teacher disfavours, so
#     numbers it would have copied as well are not pushed down): student 0.90, 0.89, 0.059; teacher 0.79, 0.69, 0.14
# (the plain loop had KL 0.05-0.1 halving the teacher's malformed answers, 0.27 -> 0.12-0.13, at a higher score; the
# stack did not repeat it). Other base models and their hinted misquote rates: cli/studies/degenerate.py.
DEFAULT_TEACHER_TEMPERATURE = 1.0
# The KL term: at 0.1 the student's sums fell as much as at 0.05 and the teacher's worst seed fell to 0.81 and 0.80
# (figures at the top of this file).
DEFAULT_KL_BETA = 0.05
DEFAULT_TRAINER: dict[str, Any] = {"negative_credit": "teacher"}
# Per setting, over DEFAULT_TRAINER. The student's vote keeps off the tokens that spell a number (rlcore's reward_on):
# the simulated student praises style and never checks a sum, so with the paper's "all" a +1 for a casual reply also
# reinforces a wrong sum in it. cli/studies/sums.py on the student's checkpoints: the right result's probability fell
# about 0.012 on average at "all" (fifteen seeds, up to 0.040), 0.008 at "words" (twelve, at most 0.017). The teacher
# does read the numbers a comment quotes (a misquoted step gets a complaint), so its vote keeps the digits: at "words"
# its worst seed fell to 0.87, 0.74 and 0.79 in three runs (figures at the top of this file).
SETTING_TRAINER: dict[str, dict[str, Any]] = {"student": {"binary_credit": "words"}, "teacher": {}}
METHODS = ("binary", "opd", "combined")


@dataclass
class ExperimentConfig:
    setting: str = "student"
    methods: list[str] = field(default_factory=lambda: ["combined"])
    interactions: int = 36  # conversations per run, one per train-split problem
    seeds: int = 1
    eval_every: int = 12  # 0: evaluate before and after only
    eval_problems: int = 216  # one seed's accuracy has an SD of about 0.08 at 36 problems, 0.04 at 108
    rounds: int = 2  # judged answers per conversation (each followed by the user's reaction)
    lr: float = DEFAULT_LR
    ppo_epochs: int = DEFAULT_PPO_EPOCHS  # updates per batch; a ``trainer`` entry for it wins
    batch_size: int = 16
    max_staleness: int = 1
    kl_beta: float = DEFAULT_KL_BETA  # KL to the base model (paper: 0 in simulation)
    teacher_temperature: float = DEFAULT_TEACHER_TEMPERATURE  # of the OPD teacher's log-probs (paper: 1.0)
    # other TrainingInput hyper-parameters, e.g. clip_eps_high
    trainer: dict[str, Any] | None = None  # None: default_trainer(setting)
    temperature: float = 0.7  # sampling temperature of the interactions and of the evaluations
    concurrency: int = 2  # conversations in flight at once
    pace: bool = True  # start a conversation only when no full batch waits to be trained (see RunTrainer.drain)
    # after the last conversation, train the samples left over when they fill at least half a batch (RunTrainer.flush):
    # a run whose stream gave 29 samples then trains on all of them, not on one batch of 16
    final_batch: bool = True
    eval_concurrency: int = 8
    max_tokens: int = 320
    preset: str = "default"  # tiny model preset, unless model_path names a model folder
    model_path: str = ""
    out: str = ""  # local folder for model copies, plot and summary; default <runtime>/experiments/<id>
    experiment_id: str = ""
    keep_models: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        if self.trainer is None:
            self.trainer = default_trainer(self.setting)

    def validate(self) -> None:
        if self.setting not in ("student", "teacher"):
            raise ValueError(f"unknown setting {self.setting!r}: student or teacher")
        bad = [m for m in self.methods if m not in METHODS]
        if bad or not self.methods:
            raise ValueError(f"unknown method(s) {bad}: choose from {', '.join(METHODS)}")
        if self.interactions < 1 or self.seeds < 1 or self.eval_problems < 1 or self.batch_size < 1 \
                or self.ppo_epochs < 1:
            raise ValueError("interactions, seeds, eval_problems, batch_size and ppo_epochs must be >= 1")
        if not self.teacher_temperature > 0:
            raise ValueError(f"teacher_temperature must be > 0, got {self.teacher_temperature}")
        trainer_options(self.trainer)


TRAINER_OPTIONS = ("clip_eps", "clip_eps_high", "kl_estimator", "loss_agg", "ppo_epochs", "num_minibatches",
                   "grad_clip", "weight_decay", "adam_eps", "w_binary", "w_opd", "negative_credit",
                   "negative_credit_margin", "binary_credit")


def trainer_options(options: dict[str, Any] | list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings (or a dict) -> TrainingInput fields of the right type; an unknown key or a value that is
    not of the field's type is a ValueError that names it."""
    from contracts.training import TrainingInput

    return typed_options(options, TrainingInput(run="", method="combined"), TRAINER_OPTIONS, "trainer option")


def typed_options(options: dict[str, Any] | list[str], defaults: Any, known: tuple[str, ...] | list[str],
                  what: str) -> dict[str, Any]:
    """``KEY=VALUE`` strings (or a dict) -> values of the type of ``defaults``' field of that name, for ``known``
    keys only; anything else is a ValueError naming the ``what``."""
    pairs = options.items() if isinstance(options, dict) else (_split_option(o, what) for o in options)
    out = {}
    for key, value in pairs:
        if key not in known:
            raise ValueError(f"unknown {what} {key!r}; known: {', '.join(known)}")
        kind = type(getattr(defaults, key))
        try:
            out[key] = kind(value)
        except (TypeError, ValueError):
            raise ValueError(f"{what} {key}={value!r} is not a {kind.__name__}") from None
    return out


def default_trainer(setting: str) -> dict[str, Any]:
    """The trainer options a personal experiment of ``setting`` runs with (``DEFAULT_TRAINER``, ``SETTING_TRAINER``)."""
    return {**DEFAULT_TRAINER, **SETTING_TRAINER.get(setting, {})}


def personal_trainer(options: list[str], setting: str = "student") -> dict[str, Any]:
    """``--trainer`` options of the personal experiments over the setting's defaults (``default_trainer``)."""
    return {**default_trainer(setting), **_parse_trainer(options)}


def _parse_trainer(options: list[str]) -> dict[str, Any]:
    try:
        return trainer_options(options)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--trainer") from None


def _split_option(text: str, what: str = "trainer option") -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"{what} {text!r} is not KEY=VALUE")
    return key.strip(), value.strip()


def _bar(total: int, desc: str, enabled: bool, leave: bool = True) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, disable=not enabled, leave=leave, dynamic_ncols=True)


def start_temporal(stack: Any, s: Settings, gateway: bool = False) -> None:
    """The experiment's Temporal dev server, after checking that no other stack holds its ports."""
    host, port = s.temporal_address.rsplit(":", 1)
    ports = [("Temporal", host, int(port)), ("engine", "127.0.0.1", s.engine_port)]
    for name, h, p in ports + ([("gateway", "127.0.0.1", s.gateway_port)] if gateway else []):
        if port_open(h, p):
            raise RuntimeError(f"port {p} ({name}) is in use: is `openclaw-rl up` running? Stop it first, or "
                               "point OPENCLAW_* ports and OPENCLAW_RUNTIME_DIR elsewhere")
    stack.start(temporal_service(s), timeout_s=120)


def stop_all_but_temporal(stack: Any) -> None:
    """Stop the previous run's engine, workers and gateway; the Temporal server serves every run."""
    for old in [x for x in stack.services if x.name != "temporal"]:
        stop_pid(old.pid)
        stack.services.remove(old)


def fresh_copy(base: Path, model: Path) -> Path:
    """A run's own copy of the base model (its weights change as it trains)."""
    shutil.rmtree(model, ignore_errors=True)
    shutil.copytree(base, model)
    return model


def base_model(preset: str, model_path: str = "") -> Path:
    """The model every run copies: ``model_path`` as is, else the tiny model of ``preset`` (built once, cached)."""
    if model_path:
        if not (Path(model_path) / "config.json").exists():
            raise FileNotFoundError(f"{model_path} holds no model (config.json missing)")
        return Path(model_path)
    from tinymodel.build import build_tiny, default_path, read_stamp

    path = default_path(preset)
    if (path / "config.json").exists() and read_stamp(path) is None:
        return path  # a model someone put there: never rebuilt over
    return build_tiny(path, preset)


class Experiment:
    """Runs the experiment; a context manager so that everything it started is stopped whatever happens."""

    def __init__(self, cfg: ExperimentConfig, settings: Settings | None = None) -> None:
        from openclaw_rl.store import store_from_settings

        cfg.validate()
        self.cfg = cfg
        self.s = settings or get_settings()
        self.store = store_from_settings(self.s)
        self.id = cfg.experiment_id or f"{cfg.setting}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
        self.dir = Path(cfg.out) if cfg.out else self.s.runtime_dir / "experiments" / self.id
        self.stack = Stack(self.s)
        self.rows: list[dict[str, Any]] = []
        self.answers: list[dict[str, Any]] = []
        self.runs: list[dict[str, Any]] = []

    # -- lifecycle ------------------------------------------------------------------------------------------------
    def __enter__(self) -> "Experiment":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.stack.stop_all()

    def start_temporal(self) -> None:
        start_temporal(self.stack, self.s, gateway=True)

    @contextmanager
    def run_services(self, env: dict[str, str], model: Path) -> Iterator[None]:
        """Engine on the run's model copy, workers and gateway with the run's settings (``env``); stopped when the next
        run starts. On success they stay up until ``stop()`` (the demo's ``--keep-up`` browses them)."""
        started: list[Service] = []
        stop_all_but_temporal(self.stack)
        try:
            for svc, timeout in ((engine_service(self.s, str(model)), 300), (worker_service(self.s), 60),
                                 (gateway_service(self.s), 120)):
                svc.env = {**svc.env, **env}
                started.append(self.stack.start(svc, timeout_s=timeout))
            yield
        except BaseException:
            for svc in reversed(started):
                stop_pid(svc.pid)
                if svc in self.stack.services:
                    self.stack.services.remove(svc)
            raise

    # -- the experiment -------------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        t0 = time.monotonic()
        self.dir.mkdir(parents=True, exist_ok=True)
        base = base_model(self.cfg.preset, self.cfg.model_path)
        self.start_temporal()
        for method in self.cfg.methods:
            for seed in range(self.cfg.seeds):
                self.runs.append(self.run_one(method, seed, base))
        return self.finish(time.monotonic() - t0)

    def run_one(self, method: str, seed: int, base: Path) -> dict[str, Any]:
        from openclaw_rl.keys import KeyStore

        run = f"{self.id}-{method}-s{seed}"
        model = fresh_copy(base, self.dir / f"{method}-s{seed}" / "model")
        env = {"OPENCLAW_RUN": run, "OPENCLAW_METHOD": method, "OPENCLAW_MODEL_PATH": str(base),
               "OPENCLAW_TEACHER_TEMPERATURE": str(self.cfg.teacher_temperature)}
        if "run" in Settings.model_fields:  # the gateway's sessions feed the run it is told
            where = RunPlace(run, "", self.store)
        else:  # a gateway whose sessions always feed run "default": give each run a store of its own instead
            url = f"{self.s.resolved_store_url.rstrip('/')}/experiments/{self.id}/{run}"
            env["OPENCLAW_STORE_URL"] = url
            where = RunPlace("default", url, _store_at(url, self.s))
        t0 = time.monotonic()
        with self.run_services(env, model):
            key = KeyStore.in_runtime_dir(self.s.runtime_dir).add(run[-64:])
            try:
                info = asyncio.run(self._run_async(run, method, seed, model, key, where))
            finally:
                KeyStore.in_runtime_dir(self.s.runtime_dir).revoke(run[-64:])
        if not self.cfg.keep_models:
            shutil.rmtree(model.parent, ignore_errors=True)
        return {**info, "run": run, "method": method, "seed": seed, "training_run": where.run,
                "store": where.store.url_for(), "wall_s": round(time.monotonic() - t0, 1)}

    async def _run_async(self, run: str, method: str, seed: int, model: Path, key: str,
                         where: "RunPlace") -> dict[str, Any]:
        from cli.temporal import connect, ping_worker
        from envs.personal.driver import GatewayDriver
        from envs.personal.evaluate import heldout_problems
        from envs.personal.problems import generate

        cfg = self.cfg
        client = await connect(self.s)
        await _retry(lambda: ping_worker(self.s, timeout_s=10), timeout_s=60)
        driver = GatewayDriver(f"http://{self.s.gateway_host}:{self.s.gateway_port}", key,
                               temperature=cfg.temperature, max_tokens=cfg.max_tokens)
        evals = heldout_problems(cfg.eval_problems)
        train = generate(cfg.interactions, split="train", seed=seed)
        trainer = RunTrainer(client, self.s, where, method, cfg, model)
        sessions: list[str] = []
        try:
            await self._evaluate(driver, run, method, seed, 0, evals, "before", trainer)
            await trainer.start()
            done = 0
            bar = _bar(cfg.interactions, f"{method} seed {seed}", cfg.progress)
            for stop in _checkpoints(cfg.interactions, cfg.eval_every):
                await self._converse(driver, key, run, seed, train[done:stop], done, sessions, bar, trainer)
                done = stop
                if done < cfg.interactions:
                    await self._evaluate(driver, run, method, seed, done, evals, "curve", trainer)
            bar.close()
            await _wait_sessions(client, sessions)
            status = await trainer.drain()
            if cfg.final_batch:
                status = await trainer.flush(minimum=(cfg.batch_size + 1) // 2)
            await self._evaluate(driver, run, method, seed, cfg.interactions, evals, "after", trainer)
            status = await trainer.end()
        except BaseException:  # error or Ctrl-C (a cancelled task): leave nothing running in Temporal
            await _terminate(client, [*sessions, *([trainer.handle.id] if trainer.handle else [])])
            raise
        finally:
            await driver.aclose()
        return {"policy_version": status.policy_version, "policy_versions": status.policy_version + 1,
                "train_steps": status.step, "samples_trained": status.samples_trained,
                "excluded_stale": status.excluded_stale}

    async def _converse(self, driver: Any, key: str, run: str, seed: int, problems: list[Any], offset: int,
                        sessions: list[str], bar: Any, trainer: "RunTrainer") -> None:
        from contracts.session import session_workflow_id
        from envs.personal.users import make_user
        from openclaw_rl.turns import session_id_for

        key_id = key.split("-")[1]
        gate, pace = asyncio.Semaphore(max(1, self.cfg.concurrency)), asyncio.Lock()
        closed: list[str] = []  # session workflows whose conversation has ended
        settled: set[str] = set()  # ... and whose samples are written

        async def one(i: int, problem: Any) -> None:
            raw = f"{run}/{problem.id}"
            wid = session_workflow_id(session_id_for(key_id, raw, []))
            sessions.append(wid)
            async with gate:
                if self.cfg.pace:  # a person answers slower than a train step: never run a batch ahead
                    async with pace:
                        # judging lags the conversation: a batch is only visible once its sessions have written
                        # their samples, so wait for those first, then for the run to train every full batch
                        pending = [w for w in closed if w not in settled]
                        await _wait_sessions(trainer.client, pending)
                        settled.update(pending)
                        await trainer.drain()
                # one simulated user per conversation: reproducible whatever the interleaving
                await driver.converse(make_user(self.cfg.setting, seed * 100_003 + i), problem, session_id=raw,
                                      rounds=self.cfg.rounds)
                closed.append(wid)
            bar.update(1)

        await asyncio.gather(*(one(offset + j, p) for j, p in enumerate(problems)))

    async def _evaluate(self, driver: Any, run: str, method: str, seed: int, interactions: int, problems: list[Any],
                        phase: str, trainer: "RunTrainer") -> None:
        from envs.personal.evaluate import eval_sample_seed, evaluate

        bar = _bar(len(problems), f"eval ({phase}, {interactions} interactions)", self.cfg.progress, leave=False)
        ev = await evaluate(driver, self.cfg.setting, problems, tag=f"{run}/{interactions}",
                            concurrency=self.cfg.eval_concurrency, temperature=self.cfg.temperature,
                            sample_seed=eval_sample_seed(seed), on_done=lambda: bar.update(1))
        bar.close()
        status = await trainer.status()
        version = ev.policy_version if ev.policy_version is not None else (status.policy_version if status else 0)
        common = {"experiment": self.id, "setting": self.cfg.setting, "method": method, "seed": seed, "run": run,
                  "interactions": interactions, "phase": phase}
        self.rows.append({**common, "score": ev.score, "accuracy": ev.accuracy,
                          "degenerate_rate": ev.degenerate_rate, "n_problems": ev.n,
                          "policy_version": int(version), "samples_trained": status.samples_trained if status else 0,
                          "train_steps": status.step if status else 0, "lr": self.cfg.lr,
                          "batch_size": self.cfg.batch_size, "recorded_at": time.time()})
        self.answers += [{**common, **asdict(it)} for it in ev.items]

    # -- results --------------------------------------------------------------------------------------------------
    def finish(self, wall_s: float) -> dict[str, Any]:
        from cli.experiments.results import plot_curve, summarize, write_results

        results_url = write_results(self.store, self.id, self.rows, self.answers)
        plot = plot_curve(self.rows, self.dir / "curve.png", title=f"personal agent, {self.cfg.setting} setting")
        self.store.put_bytes(f"experiments/{self.id}/curve.png", plot.read_bytes())
        summary = summarize(self.rows, self.runs) | {
            "experiment": self.id, "setting": self.cfg.setting, "methods": self.cfg.methods,
            "interactions": self.cfg.interactions, "seeds": list(range(self.cfg.seeds)),
            "config": asdict(self.cfg), "plot": str(plot), "results": results_url, "folder": str(self.dir),
            "sql": f"openclaw-rl sql \"SELECT method, seed, interactions, phase, round(score, 3) AS score, "
                   f"round(accuracy, 3) AS accuracy, round(degenerate_rate, 3) AS degenerate_rate, policy_version, "
                   f"samples_trained FROM experiments WHERE "
                   f"experiment = '{self.id}' ORDER BY method, seed, interactions\"",
            "temporal_ui": f"http://127.0.0.1:{self.s.temporal_ui_port}", "wall_s": round(wall_s, 1)}
        (self.dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        self.store.put_bytes(f"experiments/{self.id}/summary.json", json.dumps(summary, default=str).encode())
        return summary


def interrupt_on_sigterm() -> None:
    """SIGTERM (``kill``, a CI timeout) unwinds like Ctrl-C, so whatever was started gets stopped."""
    import signal

    def _raise(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _raise)


def _checkpoints(total: int, every: int) -> list[int]:
    """Interaction counts after which to stop and evaluate: every ``every``, and the end."""
    points = list(range(every, total, every)) if every > 0 else []
    return [*points, total]


async def _retry(fn: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await fn()
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(1.0)


async def _wait_sessions(client: Any, workflow_ids: list[str], timeout_s: float = 600.0) -> None:
    """Every session workflow has closed: its turns are judged and its samples written."""
    from temporalio.service import RPCError

    deadline = time.monotonic() + timeout_s
    for wid in workflow_ids:
        while True:
            try:
                await asyncio.wait_for(client.get_workflow_handle(wid).result(),
                                       timeout=max(1.0, deadline - time.monotonic()))
                break
            except RPCError:  # not started yet: the gateway hands turns over after the reply
                if time.monotonic() > deadline:
                    raise TimeoutError(f"session workflow {wid} never appeared") from None
                await asyncio.sleep(0.5)


async def _terminate(client: Any, workflow_ids: list[str]) -> None:
    for wid in workflow_ids:
        try:
            await asyncio.wait_for(client.get_workflow_handle(wid).terminate("experiment stopped"), timeout=5)
        except Exception:  # noqa: BLE001 - already closed, or never started
            pass


@dataclass
class RunPlace:
    """Where a run's samples land: the training run name and the store (url "" = the configured one)."""

    run: str
    store_url: str
    store: Any


def _store_at(url: str, s: Settings) -> Any:
    from openclaw_rl.store import store_from_settings

    return store_from_settings(s, url)


class RunTrainer:
    """The run's TrainingWorkflow: start, status, wait until no full batch is left, stop."""

    def __init__(self, client: Any, s: Settings, where: RunPlace, method: str, cfg: ExperimentConfig,
                 model: Path) -> None:
        self.client, self.s, self.method, self.cfg, self.model = client, s, method, cfg, model
        self.run, self.store_url, self.store = where.run, where.store_url, where.store
        self.handle: Any = None
        self.ended: Any = None

    async def start(self) -> None:
        from contracts.training import TRAINING_WORKFLOW, TrainingInput, TrainingStatus, training_workflow_id

        cfg = self.cfg
        inp = TrainingInput(run=self.run, method=self.method, batch_size=cfg.batch_size, store_url=self.store_url,
                            max_staleness=cfg.max_staleness, engines=[self.s.engine_url], model_path=str(self.model),
                            lr=cfg.lr, kl_beta=cfg.kl_beta, poll_s=1.0, max_poll_s=5.0,
                            **{"ppo_epochs": cfg.ppo_epochs, **trainer_options(cfg.trainer)})
        self.handle = await self.client.start_workflow(TRAINING_WORKFLOW, inp, id=training_workflow_id(self.run),
                                                       task_queue=self.s.task_queue_orchestrator,
                                                       result_type=TrainingStatus)

    async def status(self) -> Any:
        from contracts.training import TrainingStatus

        if self.handle is None:
            return self.ended
        return await self.handle.query("status", result_type=TrainingStatus)

    async def _select(self, policy_version: int, batch_size: int) -> Any:
        from activities.training import select_batch
        from contracts.training import SelectBatchInput

        return await asyncio.to_thread(select_batch, self.store, SelectBatchInput(
            run=self.run, store_url=self.store_url, policy_version=policy_version, batch_size=batch_size,
            max_staleness=self.cfg.max_staleness))

    async def _until(self, ready: Any, timeout_s: float, failure: str) -> Any:
        """Nudge the run (samples-available signal) until ``await ready(status)`` holds; returns that status."""
        from contracts.training import SAMPLES_AVAILABLE_SIGNAL

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            st = await self.status()
            if st.paused and st.last_error:
                raise RuntimeError(f"training run {self.run} paused: {st.last_error}")
            if await ready(st):
                return st
            await self.handle.signal(SAMPLES_AVAILABLE_SIGNAL)
            await asyncio.sleep(0.5)
        raise TimeoutError(f"training run {self.run} {failure} after {timeout_s:.0f}s")

    async def drain(self, timeout_s: float = 900.0) -> Any:
        """Wait until the run is waiting and the store holds no full batch it could train; returns its status."""
        async def no_full_batch(st: Any) -> bool:
            return st.phase == "waiting" and not (await self._select(st.policy_version, self.cfg.batch_size)).sample_ids

        return await self._until(no_full_batch, timeout_s, "still had full batches")

    async def flush(self, minimum: int, timeout_s: float = 900.0) -> Any:
        """One last step on the untrained samples left (fewer than a batch) when there are at least ``minimum``: the
        run's batch size is set to their number for that step (``set_hparams``); returns the run's status after it."""
        from contracts.training import HparamsUpdate

        first = await self.status()
        left = (await self._select(first.policy_version, 1 << 30)).available
        if left < max(1, minimum):
            return first
        await self.handle.execute_update("set_hparams", HparamsUpdate(request_id=f"{self.run}-final-batch",
                                                                      batch_size=left))

        async def stepped(st: Any) -> bool:
            return st.step > first.step and st.phase == "waiting"

        return await self._until(stepped, timeout_s, f"did not train its last {left} samples")

    async def end(self) -> Any:
        """Stop the run at a step boundary and return its final status (terminate it if it does not stop)."""
        from contracts.training import ControlRequest

        if self.handle is None:
            return self.ended
        handle, self.handle = self.handle, None
        try:
            await handle.execute_update("stop", ControlRequest(request_id=f"{self.run}-stop", reason="experiment done"))
            self.ended = await asyncio.wait_for(handle.result(), timeout=120)
        except BaseException:
            await handle.terminate("experiment stopped")
            raise
        return self.ended


# ---------------------------------------------------------------------------------------------------------------------
# CLI: `openclaw-rl experiment personal ...`
# ---------------------------------------------------------------------------------------------------------------------

app = typer.Typer(no_args_is_help=True, help="Experiments on the real stack; each prints JSON with --json.")


@app.callback()
def _group() -> None:
    """Experiments on the real stack; each prints JSON with --json."""


@app.command("personal")
def personal_command(
    setting: Annotated[str, typer.Option(help="student (homework, wants human-looking answers) or teacher "
                                              "(grading, wants specific friendly comments)")] = "student",
    method: Annotated[str, typer.Option(help="binary, opd or combined; several comma-separated for a comparison")]
    = "combined",
    interactions: Annotated[int, typer.Option(help="conversations per run (one per train-split problem)")] = 36,
    seeds: Annotated[int, typer.Option(help="runs per method, each from a fresh copy of the base model")] = 1,
    eval_every: Annotated[int, typer.Option(help="evaluate every K interactions for the curve (0: only before "
                                                 "and after)")] = 12,
    eval_problems: Annotated[int, typer.Option(help="held-out problems per evaluation")] = 216,
    rounds: Annotated[int, typer.Option(help="judged answers per conversation")] = 2,
    lr: Annotated[float, typer.Option(help="learning rate (the paper's 1e-5 is for 4B+ models)")] = DEFAULT_LR,
    ppo_epochs: Annotated[int, typer.Option(help="PPO epochs over each batch (updates per train step)")]
    = DEFAULT_PPO_EPOCHS,
    batch_size: Annotated[int, typer.Option(help="samples per train step (paper: 16)")] = 16,
    max_staleness: Annotated[int, typer.Option(help="train on samples up to this many versions old")] = 1,
    kl_beta: Annotated[float, typer.Option(help="KL to the base model (paper: 0 in simulation)")] = DEFAULT_KL_BETA,
    teacher_temperature: Annotated[float, typer.Option(help="temperature of the OPD teacher's log-probs (paper: 1.0; "
                                                            "below 1 a sharper teacher)")]
    = DEFAULT_TEACHER_TEMPERATURE,
    trainer: Annotated[list[str] | None, typer.Option(help="another trainer hyper-parameter as KEY=VALUE, repeatable "
                                                           "(defaults: negative_credit=teacher; the student's "
                                                           "binary_credit=words): " + ", ".join(TRAINER_OPTIONS))]
    = None,
    temperature: Annotated[float, typer.Option(help="sampling temperature of interactions and evaluations")] = 0.7,
    concurrency: Annotated[int, typer.Option(help="conversations in flight at once")] = 2,
    final_batch: Annotated[bool, typer.Option(help="after the last conversation, train the samples left over when "
                                                   "they fill half a batch or more")] = True,
    pace: Annotated[bool, typer.Option(help="the simulated user waits while a full batch waits to be trained, as a "
                                            "person is slower than a train step (--no-pace: samples may go stale)")]
    = True,
    preset: Annotated[str, typer.Option(help="tiny model preset (default, test)")] = "default",
    model: Annotated[str, typer.Option(help="base model folder instead of the tiny model")] = "",
    out: Annotated[str, typer.Option(help="local folder for model copies, plot and summary")] = "",
    keep_models: Annotated[bool, typer.Option(help="keep each run's model copy")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON (alone on stdout)")] = False,
    progress: Annotated[bool, typer.Option(help="progress bars on stderr")] = True,
) -> None:
    """Simulated user, online training, before/after evaluation on held-out problems (the paper's Table 3)."""
    cfg = ExperimentConfig(setting=setting, methods=[m.strip() for m in method.split(",") if m.strip()],
                           interactions=interactions, seeds=seeds, eval_every=eval_every, eval_problems=eval_problems,
                           rounds=rounds, lr=lr, ppo_epochs=ppo_epochs, batch_size=batch_size,
                           max_staleness=max_staleness, kl_beta=kl_beta, teacher_temperature=teacher_temperature,
                           trainer=personal_trainer(trainer or [], setting),
                           temperature=temperature, concurrency=concurrency, pace=pace, final_batch=final_batch,
                           preset=preset, model_path=model,
                           out=out, keep_models=keep_models, progress=progress)
    interrupt_on_sigterm()
    try:
        with Experiment(cfg) as exp:
            summary = exp.run()
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    except KeyboardInterrupt:
        typer.echo("interrupted; everything started was stopped", err=True)
        raise typer.Exit(130) from None
    if as_json:
        typer.echo(json.dumps(summary, default=str))
        return
    for m, agg in summary["by_method"].items():
        typer.echo(f"{m}: score {agg['score_before']:.3f} -> {agg['score_after']:.3f} (worst seed "
                   f"{agg['score_after_min']:.3f}), accuracy {agg['accuracy_before']:.3f} -> "
                   f"{agg['accuracy_after']:.3f}, degenerate rate {agg['degenerate_rate_before']:.3f} -> "
                   f"{agg['degenerate_rate_after']:.3f}, samples trained {agg['samples_trained']}, policy versions "
                   f"{agg['policy_versions']}")
    typer.echo(f"plot: {summary['plot']}\nresults: {summary['results']}\nquery: {summary['sql']}")
