"""The approximate prefix-cache index and ``prefix-cache-scorer``.

Other plugins read the per-request match with :func:`scheduler.plugins.prefix.match.prefix_match`.
"""
