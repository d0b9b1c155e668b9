"""filters plugins (one per module)."""
