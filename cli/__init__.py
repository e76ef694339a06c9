"""The app layer: everything a person types (the `openclaw-rl` CLI, the demo, training-run commands, SQL, keys,
experiments and studies). Nothing below imports it."""
