import sys

from mrc.tools.cli import main

sys.exit(main())
