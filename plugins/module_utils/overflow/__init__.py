# Overflow: move queued jobs to cloud GPUs exactly once (issue 6). Pure logic; lab backends plug in.
