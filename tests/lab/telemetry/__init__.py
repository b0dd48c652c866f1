"""The lab's telemetry: a real Prometheus (Debian package `prometheus`) on the host."""
