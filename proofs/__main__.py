"""``python -m verikv.proofs`` is ``verikv prove``."""

import sys

from verikv.cli import main

sys.exit(main(["prove", *sys.argv[1:]]))
