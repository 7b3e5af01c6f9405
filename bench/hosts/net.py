"""Hosts as Linux network namespaces: each namespace ``crl<i>`` has a veth pair whose
outer end ``crlv<i>`` is on the bridge ``crlbr`` (``10.231.0.1/24``), its inner end
``eth0`` at ``10.231.0.<10+i>``. ``partition(i)`` sets the outer end down (the host
reaches nothing: neither the database nor the other hosts), ``heal(i)`` sets it up.
Everything needs root; ``check_permitted`` says so clearly where it is missing."""

from __future__ import annotations

import os
import subprocess

__all__ = [
    "BRIDGE",
    "GATEWAY",
    "NotPermittedError",
    "check_permitted",
    "down",
    "heal",
    "host_addr",
    "netns",
    "partition",
    "up",
]

BRIDGE = "crlbr"
GATEWAY = "10.231.0.1"


class NotPermittedError(RuntimeError):
    """Network namespaces cannot be made here (not root, or the kernel refuses)."""


def netns(i: int) -> str:
    return f"crl{i}"


def host_addr(i: int) -> str:
    return f"10.231.0.{10 + i}"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def check_permitted() -> None:
    """Raise ``NotPermittedError`` with what is missing, unless this process can make
    network namespaces and veth pairs (root, and a kernel that allows them)."""
    if os.geteuid() != 0:
        raise NotPermittedError(
            "the hosts harness needs root: it makes network namespaces, veth pairs and a"
            " bridge (run it as root, as CI does)"
        )
    probe = "crlprobe"
    _ip("netns", "del", probe, check=False)
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        raise NotPermittedError(
            f"network namespaces are not permitted here: ip netns add: {made.stderr.strip()}"
        )
    veth = _ip("link", "add", "crlprobe0", "type", "veth", "peer", "name", "crlprobe1", check=False)
    _ip("link", "del", "crlprobe0", check=False)
    _ip("netns", "del", probe, check=False)
    if veth.returncode != 0:
        raise NotPermittedError(f"veth pairs are not permitted here: {veth.stderr.strip()}")


def up(hosts: int) -> None:
    """The bridge and ``hosts`` namespaces, each with its veth pair (after ``down``:
    whatever an earlier run left is removed first)."""
    down(hosts)
    _ip("link", "add", BRIDGE, "type", "bridge")
    _ip("addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")
    for i in range(hosts):
        ns, outer = netns(i), f"crlv{i}"
        _ip("netns", "add", ns)
        _ip("link", "add", outer, "type", "veth", "peer", "name", f"crlp{i}")
        _ip("link", "set", f"crlp{i}", "netns", ns)
        _ip("link", "set", outer, "master", BRIDGE)
        _ip("link", "set", outer, "up")
        _ip("-n", ns, "link", "set", f"crlp{i}", "name", "eth0")
        _ip("-n", ns, "addr", "add", f"{host_addr(i)}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")


def down(hosts: int = 16) -> None:
    """Remove the namespaces, veth pairs and bridge (whatever of them exists)."""
    for i in range(hosts):
        _ip("link", "del", f"crlv{i}", check=False)
        _ip("netns", "del", netns(i), check=False)
    _ip("link", "del", BRIDGE, check=False)


def partition(i: int) -> None:
    _ip("link", "set", f"crlv{i}", "down")


def heal(i: int) -> None:
    _ip("link", "set", f"crlv{i}", "up")
