"""pickers plugins (one per module)."""
