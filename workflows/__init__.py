"""Temporal workflows. They import stdlib, temporalio, ``contracts``, ``rlcore`` and the activity classes they call
by reference (``workflow.execute_activity_method``), the last three through ``imports_passed_through``."""
