"""``python -m verikv`` is the ``verikv`` command."""

import sys

from verikv.cli import main

sys.exit(main())
