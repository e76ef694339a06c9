"""What the activity classes that call the engine and a judge share: closing those clients, the lazy tokenizer."""

from __future__ import annotations

from typing import Any


class EngineAndJudge:
    """Holds ``judge``, ``policy`` (a PolicyClient) and a tokenizer, or a model folder to load it from on first use."""

    def __init__(self, judge: Any, policy: Any, tokenizer: Any) -> None:
        self.judge = judge
        self.policy = policy
        self._tokenizer = tokenizer

    async def aclose(self) -> None:
        """Close the engine and judge connections (the worker calls this once it has stopped)."""
        for client in (self.policy, self.judge):
            close = getattr(client, "aclose", None)
            if close is not None:
                await close()

    @property
    def tokenizer(self) -> Any:
        if isinstance(self._tokenizer, str):
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self._tokenizer)
        return self._tokenizer
