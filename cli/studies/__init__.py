"""Studies of a model folder without the stack (malformed answers, where the sums go)."""
