"""doxa.cli."""
