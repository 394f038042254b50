"""Grafana boards and Prometheus alert rules for ray-accel, defined in Python and generated.

- `boards/`: the boards, one module each, built with grafanalib;
- `alerts/`: the alert rules, their promtool unit tests and their runbook;
- `thresholds.py`: the tunable numbers the rules use;
- `generate.py`: renders every generated file (committed under `generated/`);
- `install.py`: puts the boards into a Ray head's Grafana provisioning folder;
- `cli.py`: the `ray-accel grafana` command.

Every metric name in a query comes from the catalog (`exporter/catalog.py`),
so renaming a metric changes the boards and rules, or breaks their build.
"""
