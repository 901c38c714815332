import sys

from dataplane.cli import main

sys.exit(main())
