"""One module per alert rule group; each has `rules(config)`, in the rules file's order."""
