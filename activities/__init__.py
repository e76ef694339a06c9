"""Temporal activities: classes holding their clients, registered as bound methods by workers/."""
