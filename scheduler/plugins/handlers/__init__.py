"""handlers plugins (one per module)."""
