import sys

from streamscope.cli import main

__all__: list[str] = []


sys.exit(main())
