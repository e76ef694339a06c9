"""Experiments: the personal and general tracks through the whole stack, offline and replayed variants, results."""
