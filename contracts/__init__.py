"""The stdlib dataclasses every workflow, activity, signal, update and query exchanges (Temporal payloads), one
module per track: `session` (personal track), `episode` (general track: episodes and rollouts), `training`,
`health`. New fields always get defaults so older histories still decode."""
