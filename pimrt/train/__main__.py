import sys

from pimrt.train.loop import main

sys.exit(main())
