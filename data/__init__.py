"""doxa.data."""
