"""``python -m epp``: the same as the ``epp`` console script."""

from __future__ import annotations

import sys

from epp.cli import main

if __name__ == "__main__":
    sys.exit(main())
