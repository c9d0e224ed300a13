# CrossHair plugin, exec'd by ``crosshair check ... --extra_plugin``: install the state factories,
# a mutant when $VERIKV_CROSSHAIR_MUTANT names one, and the contract scope (the targets named on
# the command line); see verikv.proofs.crosshair.targets.
import os
import sys

from verikv.proofs.crosshair.targets import MUTANT_ENV, activate, configure_crosshair

activate(os.environ.get(MUTANT_ENV))
configure_crosshair({arg for arg in sys.argv[2:] if not arg.startswith("-")})
