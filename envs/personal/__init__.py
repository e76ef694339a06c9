"""The personal-agent experiment: a student doing GSM8K-style homework and a teacher grading it (simulated users).

- ``problems``: seeded word problems from the project's own templates, with a fixed train / held-out split;
- ``styles``: solutions and grading comments rendered in the styles the users dislike ("ai", "terse") or want
  ("casual", "friendly_specific"), plus the users' phrasings (requests, hints, complaints);
- ``scoring``: the deterministic personalization scorer (a rubric stand-in for the paper's LLM evaluator);
- ``users``: the simulated student, teacher and structured student (the student's homework, the opposite taste).
"""
