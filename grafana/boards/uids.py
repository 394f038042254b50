"""The boards' uids: stable, so links and bookmarks between them keep working."""

OVERVIEW = "ray-accel-overview"
NODE = "ray-accel-node"
WORKLOAD = "ray-accel-workload"
INTERCONNECT = "ray-accel-interconnect"
HEALTH = "ray-accel-health"
AGENT = "ray-accel-agent"
