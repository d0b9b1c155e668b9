"""scorers plugins (one per module)."""
