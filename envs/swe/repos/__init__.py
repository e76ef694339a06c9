"""The SWE suite's repos, as Python data: one module per domain, each with a ``REPOS`` list."""
