"""Operating a vLLM deployment: ``kvplan alerts`` (Prometheus rules + Grafana dashboard) and the
shared thresholds. Nothing heavy is imported here: the CLI imports submodules inside commands."""
