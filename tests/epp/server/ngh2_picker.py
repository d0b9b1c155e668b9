"""The picker with the ngh2 prototype connection (:mod:`ngh2_proto`) in place of ``H2Connection``.

Run as the picker behind the real Envoy to weigh ngh2 against our engine (issue 12 item 4)::

    epp-bench extproc-envoy --picker-script tests/epp/server/ngh2_picker.py --configs gie-fail-closed ...

Takes the picker's flags (``--grpc-engine=h2``, the default). Measurement only; ``ngh2`` is installed by hand.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ngh2_proto import NgH2Connection

import epp.server.h2.server as h2_server
from epp.cli import main

h2_server.H2Connection = NgH2Connection  # type: ignore[misc, assignment]

if __name__ == "__main__":
    sys.exit(main())
