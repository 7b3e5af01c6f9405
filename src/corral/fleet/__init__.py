"""corral's fleet: ``corral up`` and the pools that spawn and retire workers.

- :mod:`corral.fleet.manifest`: the fleet manifest (the supervisor's, plus
  ``[[pools]]``, ``[cluster]`` and ``[board]``), validated.
- :mod:`corral.fleet.pools`: the pools at run time (members as supervised agents,
  the decision of :mod:`corral.scaling` applied, retirement through the idle protocol).
- :mod:`corral.fleet.up`: everything ``corral up`` runs in one process.
"""

from __future__ import annotations

__all__: list[str] = []
