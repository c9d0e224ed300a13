"""Entry points whose hostile cases fail today, by case subject (the case id before ``[``).

``KNOWN_OPEN`` maps a subject to what fails there. The suite still runs every case of a listed
subject: a failing one is reported as an expected failure (``xfail``) by pytest and counted
apart by ``python tests/hostile.py``; a passing one passes. `known_open_still_fail` reports
a listed subject none of whose cases fails any more, so the entry is deleted once its fix lands.
"""

KNOWN_OPEN: dict[str, str] = {
    "testing.build_cache_manager": "a config that is not a ManagerConfig raises AttributeError",
    "testing.CacheManagerAdapter": "a config that is not a ManagerConfig raises AttributeError",
    "testing.KeyFailingAdapter": "a config that is not a ManagerConfig raises AttributeError",
    "testing.machine_factory": "a layout that is not a Layout raises AttributeError",
    "testing.page_ids_of": "a result that is not a sequence of page lists raises TypeError",
    "testing.Layout": "name and config are not checked (any value is accepted)",
    "testing.MachineOptions": "mode and the flags are not checked (any value is accepted)",
    "testing.pool_machine.detection_settings": "the counts reach Hypothesis unchecked: its InvalidArgument, or "
                                               "a bool accepted as a count",
    "testing.manager_machine.find_manager_failure": "the factory and layout are not checked: a bad one is "
                                                    "reported as a failure of the manager",
    "testing.pool_machine.find_pool_failure": "the factory is not checked: a bad one is reported as a failure "
                                              "of the pool",
    "testing.pool_machine.make_pool_machine": "the factory is not checked (any value is accepted)",
    "testing.pool_machine.pool_invariant_failures": "a pool or state of another type raises AttributeError",
    "testing.manager_machine.window_pages_real": "a config or hit of another type raises AttributeError",
}
