import sys

from streamscope.cli import main

sys.exit(main())
