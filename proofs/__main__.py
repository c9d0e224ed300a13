"""``python -m verikv.proofs`` is ``verikv prove``."""

import sys

from verikv.proofs.runner import main

sys.exit(main(sys.argv[1:]))
