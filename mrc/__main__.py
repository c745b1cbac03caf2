import sys

from mrc.cli import main

sys.exit(main())
