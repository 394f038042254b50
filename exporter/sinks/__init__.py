"""Sinks: each turns the latest node snapshot into one output format."""
