import sys

from batchop.cli.main import main

sys.exit(main())
