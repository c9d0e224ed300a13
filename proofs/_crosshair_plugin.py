# CrossHair plugin, exec'd by ``crosshair ... --extra_plugin``: install the state factories and,
# when $VERIKV_CROSSHAIR_MUTANT names one, a mutant (see verikv.proofs.crosshair_targets).
import os

from verikv.proofs.crosshair_targets import MUTANT_ENV, activate, configure_crosshair

activate(os.environ.get(MUTANT_ENV))
configure_crosshair()
