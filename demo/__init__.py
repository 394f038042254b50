"""The demo: a Ray cluster on simulated GPUs, a small workload, and the agent attributing it."""
