"""Plugins that act on the model server's response (one per module)."""
