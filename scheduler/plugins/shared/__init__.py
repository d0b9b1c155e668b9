"""Helpers several plugin kinds share; no plugin lives here (nothing is registered from this folder).

* :mod:`~scheduler.plugins.shared.inflight`: the per-endpoint in-flight request / token tracker;
* :mod:`~scheduler.plugins.shared.inflight_hooks`: lifecycle hooks that feed a plugin's tracker;
* :mod:`~scheduler.plugins.shared.inflight_consumer`: the mixin for plugins that read the shared
  in-flight load producer or keep their own tracker;
* :mod:`~scheduler.plugins.shared.selector`: Kubernetes label selectors (validation and matching).

Used by scorers, filters, the prefix affinity scorer and saturation detectors.
"""
