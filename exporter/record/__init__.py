"""Recording: what the vendor libraries answered, turned into a scenario the fakes replay.

`ray-accel record` (command.py) samples the node like the agent, keeps compact
frames (frames.py, history.py) and builds a scenario file (scenario_file.py)
in the format of docs/simulation.md, with identities replaced (privacy.py)."""
