"""Judge prompt templates (PRM, hindsight hint, personalization evaluator, general-track step judges).

``render(name, **values)`` returns OpenAI chat messages; ``names()`` lists the templates; see ``prompts.loader``.
"""

from prompts.loader import PromptError, fields, names, render

# Template names used by the judging code.
PERSONAL_PRM = "personal_prm"
PERSONAL_HINT = "personal_hint"
PERSONALIZATION_EVAL = "personalization_eval"
GENERAL_JUDGES = {
    "terminal": "general_terminal",
    "gui": "general_gui",
    "swe": "general_swe",
    "toolcall": "general_toolcall",
}

__all__ = ["GENERAL_JUDGES", "PERSONALIZATION_EVAL", "PERSONAL_HINT", "PERSONAL_PRM", "PromptError", "fields", "names",
           "render"]
