"""Entry points whose hostile cases fail today, by case subject (the case id before ``[``).

``KNOWN_OPEN`` maps a subject to what fails there. The suite still runs every case of a listed
subject: a failing one is reported as an expected failure (``xfail``) by pytest and counted
apart by ``python tests/hostile.py``; a passing one passes. `known_open_still_fail` reports
a listed subject none of whose cases fails any more, so the entry is deleted once its fix lands.
"""

KNOWN_OPEN: dict[str, str] = {}
