"""The supervisor's decisions as pure functions: no clock reads, no I/O.

Everything that depends on time takes ``now`` (seconds since the epoch, a float) from
the caller, and randomness (the restart jitter) is an injected ``rand`` returning a
float in ``[0, 1)``. The process runtime feeds events in (spawned, beat, exited,
operator stop) and asks what to do and when it next needs to wake up.

- :class:`State` and :data:`TRANSITIONS`: the per-agent state machine.
- :class:`Exit`: how a process ended (exit code, signal, or unknown).
- :func:`should_restart`: the restart policies ``always`` / ``on-failure`` / ``never``.
- :class:`RestartTracker`: backoff (1, 2, 4, 8, 16 s capped, plus 0-500 ms jitter),
  its reset after 60 s RUNNING, exhaustion after 10 of the policy's restarts within
  300 s, and the count of every restart (the operator's too) that status shows.
- :func:`startup_expired`, :func:`heartbeat_expired`, :func:`agent_deadline`,
  :func:`next_deadline`: the timeouts, and the earliest moment anything can change,
  so the daemon sleeps until then instead of polling.
- :func:`parse_heartbeat`: the stdout line ``HEARTBEAT <unix_ts> <status>``.
"""

from __future__ import annotations

import math
import os
import random
import re
import signal as _signal
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from corral.backoff import delay as _backoff_delay
from corral.errors import CorralError

__all__ = [
    "EXHAUSTED_FLAG",
    "RESTART_POLICIES",
    "TRANSITIONS",
    "Beat",
    "Decision",
    "Exit",
    "RestartConfig",
    "RestartTracker",
    "State",
    "TransitionError",
    "agent_deadline",
    "can_transition",
    "check_transition",
    "decide",
    "heartbeat_expired",
    "next_deadline",
    "parse_heartbeat",
    "should_restart",
    "startup_expired",
]

RESTART_POLICIES = ("always", "on-failure", "never")
EXHAUSTED_FLAG = "restart-exhausted"


class State(StrEnum):
    """An agent's state. WAITING is a state of its own (a dependency is restarting,
    the agent was sent SIGUSR1), not a flag on RUNNING."""

    STOPPED = "STOPPED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    UNHEALTHY = "UNHEALTHY"
    WAITING = "WAITING"


_S = State
TRANSITIONS: Mapping[State, frozenset[State]] = {
    # spawned (manifest start, operator start, or a restart after backoff) / a start
    # comes due while a dependency is not RUNNING: held, no process yet
    _S.STOPPED: frozenset({_S.STARTING, _S.WAITING}),
    # first beat (or spawned with heartbeat "none") / startup timeout or exit /
    # clean exit or operator stop / a dependency restarts meanwhile
    _S.STARTING: frozenset({_S.RUNNING, _S.UNHEALTHY, _S.STOPPED, _S.WAITING}),
    # heartbeat timeout or exit / a dependency restarts / clean exit or operator stop
    _S.RUNNING: frozenset({_S.UNHEALTHY, _S.WAITING, _S.STOPPED}),
    # restart after backoff / no restart (policy, operator, exhausted) / a late beat
    # arrives before the hung process was killed / the restart comes due while a
    # dependency is not RUNNING: held
    _S.UNHEALTHY: frozenset({_S.STARTING, _S.STOPPED, _S.RUNNING, _S.WAITING}),
    # the dependency is RUNNING again (SIGUSR2) / exit or heartbeat timeout /
    # clean exit or operator stop / held: every dependency RUNNING, spawned
    _S.WAITING: frozenset({_S.RUNNING, _S.UNHEALTHY, _S.STOPPED, _S.STARTING}),
}


class TransitionError(CorralError, ValueError):
    """A state change the state machine does not allow (a bug in the caller)."""

    code = "illegal_transition"


def can_transition(old: State, new: State) -> bool:
    """Whether ``old -> new`` is a legal transition (a state to itself is not one)."""
    return new in TRANSITIONS[old]


def check_transition(old: State, new: State) -> State:
    """Return ``new`` if ``old -> new`` is legal, else raise :class:`TransitionError`."""
    if not can_transition(old, new):
        raise TransitionError(f"illegal transition {old} -> {new}")
    return new


@dataclass(frozen=True, slots=True)
class Exit:
    """How a process ended: ``code`` for a normal exit, ``signal`` when killed by a
    signal, both ``None`` when the status is unknown (an adopted process that is not
    our child). ``at`` is when the exit was seen."""

    code: int | None = None
    signal: int | None = None
    at: float | None = None

    @classmethod
    def from_returncode(cls, returncode: int, at: float | None = None) -> Exit:
        """From a ``subprocess``-style return code (negative means killed by -code)."""
        if returncode < 0:
            return cls(signal=-returncode, at=at)
        return cls(code=returncode, at=at)

    @classmethod
    def from_wait_status(cls, status: int, at: float | None = None) -> Exit:
        """From an ``os.waitpid`` status word."""
        if os.WIFSIGNALED(status):
            return cls(signal=os.WTERMSIG(status), at=at)
        if os.WIFEXITED(status):
            return cls(code=os.WEXITSTATUS(status), at=at)
        return cls(at=at)

    @classmethod
    def from_siginfo(cls, si_code: int, si_status: int, at: float | None = None) -> Exit:
        """From ``os.waitid``'s result (``si_code`` CLD_EXITED, CLD_KILLED or
        CLD_DUMPED, and ``si_status``)."""
        if si_code == os.CLD_EXITED:
            return cls(code=si_status, at=at)
        if si_code in (os.CLD_KILLED, os.CLD_DUMPED):
            return cls(signal=si_status, at=at)
        return cls(at=at)

    @property
    def known(self) -> bool:
        return self.code is not None or self.signal is not None

    @property
    def clean(self) -> bool:
        """Exited with code 0 (the only exit ``on-failure`` does not restart)."""
        return self.code == 0 and self.signal is None

    def describe(self) -> str:
        """``exit code 1``, ``killed by SIGKILL`` or ``unknown``."""
        if self.signal is not None:
            try:
                name = _signal.Signals(self.signal).name
            except ValueError:
                name = f"signal {self.signal}"
            return f"killed by {name}"
        if self.code is not None:
            return f"exit code {self.code}"
        return "unknown"


def should_restart(
    policy: str,
    exit_code: int | None,
    signal: int | None,
    stopped_by_operator: bool,
) -> bool:
    """Whether an agent whose process ended should be started again.

    An agent stopped by the operator is never restarted, whatever its policy.
    ``always`` restarts on any exit; ``never`` on none; ``on-failure`` restarts
    unless the process exited with code 0 (a signal, a non-zero code, or an unknown
    status, ``exit_code`` and ``signal`` both ``None``, count as failures).
    """
    if policy not in RESTART_POLICIES:
        raise ValueError(f"restart policy must be always, on-failure or never, not {policy!r}")
    if stopped_by_operator or policy == "never":
        return False
    if policy == "always":
        return True
    return not (exit_code == 0 and signal is None)


@dataclass(frozen=True, slots=True)
class RestartConfig:
    """Backoff and restart-limit settings (the manifest's ``[supervisor]`` table).

    The n-th restart (n from 0) waits ``min(base * 2**n, cap)`` plus
    ``jitter * rand()`` seconds. ``restart_limit`` restarts within ``restart_window``
    seconds exhaust the agent; ``reset_after`` seconds RUNNING continuously reset the
    backoff to its first step.
    """

    base: float = 1.0
    cap: float = 16.0
    jitter: float = 0.5
    restart_limit: int = 10
    restart_window: float = 300.0
    reset_after: float = 60.0


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do after an exit: ``restart`` at ``restart_at`` (after ``delay``), or
    stay STOPPED because of ``reason``: ``"operator"``, ``"policy"`` or
    ``"restart-exhausted"`` (or ``"retired"``)."""

    restart: bool
    delay: float = 0.0
    restart_at: float | None = None
    reason: str | None = None

    @property
    def exhausted(self) -> bool:
        return self.reason == EXHAUSTED_FLAG


@dataclass(slots=True)
class RestartTracker:
    """One agent's restart bookkeeping; every method takes ``now`` explicitly.

    The runtime calls :meth:`mark_running` when the agent enters RUNNING,
    :meth:`mark_down` when it leaves RUNNING for UNHEALTHY or STOPPED (WAITING keeps
    the process alive and is not a break), :meth:`record_restart` when its process
    ended and the policy says restart (it gives the delay or refuses), and
    :meth:`operator_start` when the operator starts it (clears exhaustion) and
    :meth:`operator_restart` when the operator restarts it.

    Two counts, on purpose:

    - ``restarts``: every restart the agent's process had, the policy's and the
      operator's (what ``status``, the cluster and the dashboard show);
    - the crash-loop budget, ``policy_restarts_at``: when the policy granted its own
      restarts. Every restart granted counts toward the limit, whatever ended the
      process (a crash long after startup counts like a start failure); an
      operator's restart never does. When ``restart_limit`` restarts were already
      granted within the last ``restart_window`` seconds (:meth:`budget_used`), the
      next one is refused and the agent is ``exhausted``: it goes STOPPED with the
      ``restart-exhausted`` flag.
    """

    config: RestartConfig = field(default_factory=RestartConfig)
    rand: Callable[[], float] = random.random
    attempt: int = 0  # the backoff step of the next restart
    restarts: int = 0  # every restart, the policy's and the operator's (shown)
    # when the policy granted its restarts: the crash-loop budget's own count
    policy_restarts_at: list[float] = field(default_factory=list)
    running_since: float | None = None
    exhausted: bool = False

    def mark_running(self, now: float) -> None:
        """The agent entered RUNNING (a second call while RUNNING changes nothing)."""
        if self.running_since is None:
            self.running_since = now

    def mark_down(self, now: float) -> None:
        """The agent left RUNNING; if it had run ``reset_after`` s the backoff resets."""
        self._maybe_reset(now)
        self.running_since = None

    def running_for(self, now: float) -> float:
        """Seconds RUNNING continuously (0 when not RUNNING)."""
        return 0.0 if self.running_since is None else max(0.0, now - self.running_since)

    def _maybe_reset(self, now: float) -> None:
        if self.running_for(now) >= self.config.reset_after:
            self.attempt = 0

    def budget_used(self, now: float) -> int:
        """The crash-loop budget spent: the policy's restarts granted within the last
        ``restart_window`` seconds (the operator's restarts are not in it)."""
        horizon = now - self.config.restart_window
        return sum(1 for t in self.policy_restarts_at if t > horizon)

    def next_delay(self) -> float:
        """The delay of the next restart without the jitter (its schedule step)."""
        c = self.config
        return _backoff_delay(self.attempt, base=c.base, cap=c.cap, factor=2.0)

    def record_restart(self, now: float) -> Decision:
        """The process ended and its policy says restart: grant it (with the delay
        to wait) or refuse it as exhausted."""
        self.mark_down(now)
        horizon = now - self.config.restart_window
        self.policy_restarts_at = [t for t in self.policy_restarts_at if t > horizon]
        if len(self.policy_restarts_at) >= self.config.restart_limit:
            self.exhausted = True
            return Decision(restart=False, reason=EXHAUSTED_FLAG)
        wait = self.next_delay() + self.config.jitter * self.rand()
        self.attempt += 1
        self.restarts += 1
        self.policy_restarts_at.append(now)
        return Decision(restart=True, delay=wait, restart_at=now + wait)

    def operator_start(self) -> None:
        """The operator started the agent: clear exhaustion and the backoff."""
        self.exhausted = False
        self.attempt = 0
        self.policy_restarts_at.clear()
        self.running_since = None

    def operator_restart(self) -> None:
        """The operator restarted the agent's process: one more restart shown, none
        spent of the crash-loop budget (the start that follows clears it)."""
        self.restarts += 1

    @property
    def flags(self) -> tuple[str, ...]:
        return (EXHAUSTED_FLAG,) if self.exhausted else ()

    def snapshot(self) -> dict[str, object]:
        """What a supervisor started again needs to go on counting (``pids.json``):
        the backoff step, every restart, when the policy granted its own, the RUNNING
        run, exhaustion."""
        return {
            "attempt": self.attempt,
            "restarts": self.restarts,
            "policy_restarts_at": list(self.policy_restarts_at),
            "running_since": self.running_since,
            "exhausted": self.exhausted,
        }

    def restore(self, saved: Mapping[str, object]) -> None:
        """Take back a :meth:`snapshot` (fields of the wrong type are ignored)."""

        def num(v: object) -> float | None:
            ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            return float(v) if ok else None  # type: ignore[arg-type]

        attempt, restarts = saved.get("attempt"), saved.get("restarts")
        if isinstance(attempt, int) and not isinstance(attempt, bool) and attempt >= 0:
            self.attempt = attempt
        if isinstance(restarts, int) and not isinstance(restarts, bool) and restarts >= 0:
            self.restarts = restarts
        # an earlier version's pids.json names the list "recent"
        at = saved.get("policy_restarts_at", saved.get("recent"))
        if isinstance(at, list):
            self.policy_restarts_at = [t for t in map(num, at) if t is not None]
        self.running_since = num(saved.get("running_since"))
        self.exhausted = saved.get("exhausted") is True


def decide(
    policy: str,
    exit: Exit,
    *,
    stopped_by_operator: bool,
    tracker: RestartTracker,
    now: float,
    retired: bool = False,
    not_before: float | None = None,
) -> Decision:
    """Apply the restart policy and the tracker to an exit: the one call the
    runtime makes when a process ends. Touches ``tracker`` only when the policy
    says restart. ``retired``: the agent's work is over by an outside decision (a
    pool member whose node the cluster retired), so it is not restarted whatever
    its policy (reason ``"retired"``). ``not_before``: a restart granted is not due
    before this time (a pool member's old node must be declared dead first)."""
    if stopped_by_operator:
        tracker.mark_down(now)
        return Decision(restart=False, reason="operator")
    if retired:
        tracker.mark_down(now)
        return Decision(restart=False, reason="retired")
    if not should_restart(policy, exit.code, exit.signal, False):
        tracker.mark_down(now)
        return Decision(restart=False, reason="policy")
    d = tracker.record_restart(now)
    late = not_before is not None and d.restart_at is not None and not_before > d.restart_at
    if d.restart and late and not_before is not None:
        return Decision(restart=True, delay=not_before - now, restart_at=not_before)
    return d


def startup_expired(started_at: float, timeout: float, now: float) -> bool:
    """A STARTING agent with no first beat ``timeout`` s after spawn is UNHEALTHY."""
    return now - started_at >= timeout


def heartbeat_expired(last_beat: float, timeout: float, now: float) -> bool:
    """No beat for ``timeout`` s (15 s: three missed 5 s beats) means UNHEALTHY."""
    return now - last_beat >= timeout


def next_deadline(deadlines: Iterable[float | None]) -> float | None:
    """The earliest of ``deadlines`` (``None`` entries ignored), or ``None`` when
    nothing is pending: the daemon then sleeps until an event wakes it."""
    found = [d for d in deadlines if d is not None]
    return min(found) if found else None


def agent_deadline(
    state: State,
    *,
    heartbeat: str,
    started_at: float | None = None,
    last_beat: float | None = None,
    startup_timeout: float = 30.0,
    heartbeat_timeout: float = 15.0,
    restart_at: float | None = None,
    stop_deadline: float | None = None,
) -> float | None:
    """The earliest time at which a check could change this agent's state.

    - STARTING with a heartbeat (``pipe``/``cluster``): ``started_at + startup_timeout``.
    - RUNNING or WAITING with a heartbeat: ``last_beat + heartbeat_timeout``.
    - ``restart_at``: the end of a restart backoff (an UNHEALTHY agent).
    - ``stop_deadline``: when a stopping process gets SIGKILL.

    ``heartbeat = "none"`` has no heartbeat deadlines. Exits and beats are events,
    not deadlines. Combine agents with :func:`next_deadline`.
    """
    found: list[float | None] = [restart_at, stop_deadline]
    if heartbeat != "none":
        if state is State.STARTING and started_at is not None:
            found.append(started_at + startup_timeout)
        elif state in (State.RUNNING, State.WAITING) and last_beat is not None:
            found.append(last_beat + heartbeat_timeout)
    return next_deadline(found)


@dataclass(frozen=True, slots=True)
class Beat:
    """A pipe heartbeat: the timestamp the agent wrote and its status word
    (``healthy``, ``degraded``, ``shutting-down`` or any other)."""

    ts: float
    status: str


_BEAT = re.compile(r"HEARTBEAT[ \t]+([0-9]+(?:\.[0-9]*)?)[ \t]+(\S{1,64})[ \t]*")


def parse_heartbeat(line: bytes | str) -> Beat | None:
    """``HEARTBEAT <unix_ts> <status>`` (ts an integer or fractional number of
    seconds; a trailing newline is fine) as a :class:`Beat`; anything else,
    including extra words, is ``None`` (an ordinary output line)."""
    if isinstance(line, bytes):
        if not line.startswith(b"HEARTBEAT"):
            return None
        try:
            line = line.decode("ascii")
        except UnicodeDecodeError:
            return None
    m = _BEAT.fullmatch(line.rstrip("\r\n"))
    if m is None:
        return None
    ts = float(m.group(1))
    if not math.isfinite(ts):
        return None
    return Beat(ts=ts, status=m.group(2))
