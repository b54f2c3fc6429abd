"""doxa.inference."""
