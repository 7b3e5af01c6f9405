"""ServerClock: another machine's wall clock followed with a local monotonic clock."""

from __future__ import annotations

import time

from corral.clock import ServerClock


class Ticks:
    """A monotonic clock the test moves, and a server whose wall clock it sets."""

    def __init__(self) -> None:
        self.mono = 100.0
        self.server = 1_000_000.0
        self.reads = 0
        self.down = False

    def monotonic(self) -> float:
        return self.mono

    def read(self) -> float:
        if self.down:
            raise OSError("connection refused")
        self.reads += 1
        return self.server


def test_now_is_the_servers_time_followed_with_the_monotonic_clock() -> None:
    t = Ticks()
    clock = ServerClock(t.read, every=10.0, monotonic=t.monotonic)
    assert clock.now() == 1_000_000.0
    t.mono += 3.5  # the server is not read again inside `every`
    assert clock.now() == 1_000_003.5
    assert t.reads == 1


def test_the_offset_is_measured_again_every_period() -> None:
    t = Ticks()
    clock = ServerClock(t.read, every=10.0, monotonic=t.monotonic)
    clock.now()
    t.mono += 10.0
    t.server += 42.0  # the server's clock was stepped meanwhile
    assert clock.now() == 1_000_042.0
    assert t.reads == 2


def test_a_failed_read_keeps_the_last_offset_and_retries_a_period_later() -> None:
    t = Ticks()
    clock = ServerClock(t.read, every=10.0, monotonic=t.monotonic)
    clock.now()
    t.down = True
    t.mono += 10.0
    assert clock.now() == 1_000_010.0  # the offset measured before the outage
    t.down = False
    t.server = 5.0  # not read: the retry is due a period after the failure
    t.mono += 5.0
    assert clock.now() == 1_000_015.0
    t.mono += 5.0
    assert clock.now() == 5.0


def test_before_any_read_succeeds_it_is_this_hosts_wall_clock() -> None:
    t = Ticks()
    t.down = True
    clock = ServerClock(t.read, monotonic=t.monotonic)
    before = time.time()
    now = clock.now()
    assert before <= now <= time.time()


def test_until_a_first_read_succeeds_it_is_retried_a_second_later() -> None:
    t = Ticks()
    t.down = True
    clock = ServerClock(t.read, every=10.0, monotonic=t.monotonic)
    clock.now()  # fails: the host's wall clock stands in
    t.down = False
    t.mono += 0.5
    clock.now()
    assert t.reads == 0  # not before a second has passed
    t.mono += 0.5
    assert clock.now() == 1_000_000.0
    assert t.reads == 1
