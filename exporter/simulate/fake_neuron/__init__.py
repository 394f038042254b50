"""A simulated ``neuron-monitor``: the real flags and JSON output, driven by a scenario.

`monitor.py` is the program; `neuron_fake.py` (one level up) writes the
``neuron-monitor`` launcher that runs it with the current interpreter.
"""
