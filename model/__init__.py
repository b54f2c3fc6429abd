"""doxa.model."""
