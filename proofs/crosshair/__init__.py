"""CrossHair checks of the implementation's and the spec's contracts, and their drivers."""
