"""OpenClaw-RL: online reinforcement learning for LLM agents from next-state signals, on Temporal."""

__version__ = "0.1.0"
