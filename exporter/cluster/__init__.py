"""Running agents across a Ray cluster: registration, discovery files, deployment as actors."""
