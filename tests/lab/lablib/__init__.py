"""Code behind `tests/lab/lab`: builds, starts, checks and removes the embedded lab (stdlib only)."""
