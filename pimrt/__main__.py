import sys

from pimrt.cli import main

sys.exit(main())
