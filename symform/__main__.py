import sys

from .interface.cli import main

sys.exit(main())
