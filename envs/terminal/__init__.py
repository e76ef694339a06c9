"""The terminal environment: a persistent bash shell in a bubblewrap sandbox, and a suite of tasks checked host-side."""
