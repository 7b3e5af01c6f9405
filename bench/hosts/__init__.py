"""Hosts on one machine: several corral hosts as Linux network namespaces on a bridge,
each running ``corral serve`` and ``corral supervise`` with a pool of SDK workers,
against the harness's own PostgreSQL cluster, with the faults the chaos campaign
injects (``bench/chaos.py``). ``python bench/hosts up`` sets them up and keeps them
until interrupted; ``python bench/hosts down`` removes what a run left."""

from hosts.cluster import Host, Hosts
from hosts.net import NotPermittedError, check_permitted

__all__ = ["Host", "Hosts", "NotPermittedError", "check_permitted"]
