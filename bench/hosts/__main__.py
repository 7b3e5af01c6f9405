"""``python bench/hosts up [--hosts N]``: set up N hosts (namespaces, bridge, the
harness's PostgreSQL, each host's corral serve and supervise) and keep them until
interrupted, then tear everything down. ``python bench/hosts down``: remove what an
interrupted run left (namespaces, veth pairs, bridge). Run as root."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hosts import net
from hosts.cluster import Hosts


def main() -> int:
    ap = argparse.ArgumentParser(prog="bench/hosts")
    ap.add_argument("action", choices=["up", "down"])
    ap.add_argument("--hosts", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    if args.action == "down":
        net.down()
        return 0
    try:
        net.check_permitted()
    except net.NotPermittedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="corral-hosts-") as d:
        hosts = Hosts(args.hosts, Path(d), workers=args.workers)
        try:
            hosts.up()
            for h in hosts.hosts:
                print(f"host {h.i}: namespace {h.ns}, {h.addr}; its server from here: {h.url}")
            print(f"PostgreSQL: {hosts.admin_url}; Ctrl-C tears everything down")
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            hosts.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
