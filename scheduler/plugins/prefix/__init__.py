"""prefix plugins (one per module)."""
