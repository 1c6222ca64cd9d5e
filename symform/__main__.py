import sys

from .interface.cli.cli import main

sys.exit(main())
