"""``token-producer``: the request's prompt as token ids, for the prefix index and other consumers."""
