"""saturation plugins (one per module)."""
