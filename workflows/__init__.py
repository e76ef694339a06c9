"""Temporal workflows. Import only stdlib, temporalio and ``workflows.contracts`` here (sandbox-safe)."""
