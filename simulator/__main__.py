"""``python -m simulator``: same as the ``epp-sim`` command."""

from simulator.cli import main

raise SystemExit(main())
