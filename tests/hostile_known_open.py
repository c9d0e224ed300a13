"""The hostile-input cases still failing in modules owned by other lanes (issue 12).

One table, case id -> ``"owner: manager|sizing — what fails"``; the suite marks each listed case
``xfail(strict=True)``, so a fix makes it XPASS and fail until its entry is deleted here.
Regenerate the list of open cases with ``python tests/hostile.py`` (it prints new problems and
entries that now pass). "manager" = impl/request.py, impl/hashing.py, impl/cache_manager.py,
impl/coordinators.py, impl/single_type_managers.py; "sizing" = impl/sizing/**.
"""

KNOWN_OPEN: dict[str, str] = {}
