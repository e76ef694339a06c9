"""Temporal workflows. Import only stdlib, temporalio and ``contracts`` here (sandbox-safe)."""
