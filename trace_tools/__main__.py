"""``python -m trace_tools`` runs the ``streamscope-trace`` command line."""

import sys

from trace_tools.cli import main

sys.exit(main())
