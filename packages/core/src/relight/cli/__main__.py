import sys

from relight.cli import main

sys.exit(main())
