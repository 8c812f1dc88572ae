"""From untaught to taught: how many labelled records a question of your own needs (curve.py)."""
