"""kvplan ui: the planner as a local web page (server.py), answering with the CLI's own JSON (api.py)."""
