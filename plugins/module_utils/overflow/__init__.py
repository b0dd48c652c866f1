# Overflow: move queued jobs to cloud GPUs exactly once. Pure logic; lab backends plug in.
