"""Health: Prometheus metrics, system readings (CPU, memory, Jetson thermal and power), the /metrics endpoint."""
