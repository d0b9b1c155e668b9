"""Wiring: from :class:`~epp.config.options.Options` to a running picker, and its lifecycle.

:func:`build_app` validates everything before a port is opened (EndpointPickerConfig with the
sections owned by other parts, objectives file, certificates, discovery settings) and raises
:class:`StartupError` naming the file / flag and what was expected. :class:`PickerApp` then runs:

1. the servers (:class:`~epp.server.server.EppServer`): health says live, not ready;
2. the data layer (discovery + scrapers); when its first discovery listing is applied and, with
   ``--ready-requires-endpoint`` (the default in the standalone modes), an endpoint has answered a
   scrape, health turns SERVING (with ``--ha-enable-leader-election``, only while this replica leads);
   until then a warning names every endpoint that does not answer (:mod:`epp.app.readiness`);
3. on SIGTERM/SIGINT: the background tasks stop first (leader election gives its lease up), health
   NOT_SERVING, no new streams, in-flight streams get ``--drain-timeout`` (default 30s), the rest are
   cancelled (outcome SHUTDOWN); then the data layer stops.

Feature gates (:mod:`epp.config.feature_gates`): ``haPopulateNonLeaderDatastore=false`` with leader election
starts the data layer only while this replica leads (stopped when it stops leading);
``enableLegacyMetrics`` and ``dataLayer`` are logged at start.

The scheduler's ``endpoints_removed`` hook is subscribed to the data layer's removals; every request
takes one snapshot from the data layer (``DataLayer.snapshot()``, an immutable tuple).

Modules: :mod:`epp.app.build` (:func:`build_app`, the composition root), :mod:`epp.app.picker`
(:class:`PickerApp`: start, readiness, leadership, stop), :mod:`epp.app.process` (:func:`run`,
:func:`serve`: signals, event loop, exit status), and the pieces :func:`build_app` assembles from the
flags: :mod:`epp.app.settings` (ports, TLS, token), :mod:`epp.app.stores` (objectives and model
rewrites from files), :mod:`epp.app.endpoints` (the data layer's discovery source),
:mod:`epp.app.readiness` (has an endpoint answered). :class:`StartupError` is in :mod:`epp.app.errors`.
"""

from epp.app.build import build_app
from epp.app.errors import StartupError
from epp.app.picker import PickerApp
from epp.app.process import run, serve

__all__ = ["PickerApp", "StartupError", "build_app", "run", "serve"]
