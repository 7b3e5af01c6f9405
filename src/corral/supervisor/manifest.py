"""The supervisor's manifest: which agents to run, how, and in which order.

A TOML manifest::

    [supervisor]                # every key optional; the defaults are shown
    heartbeat_interval = 5      # seconds (durations are numbers of seconds)
    heartbeat_timeout = 15
    startup_timeout = 30        # default for agents that set none
    stop_timeout = 10           # default for agents that set none
    stop_signal = "SIGTERM"     # default for agents that set none
    backoff_base = 1            # restart n waits min(base * 2**n, cap) + jitter * U[0,1)
    backoff_cap = 16
    backoff_jitter = 0.5
    backoff_reset_after = 60    # seconds RUNNING continuously that reset the backoff
    restart_limit = 10          # this many restarts within restart_window: exhausted
    restart_window = 300
    log_max_bytes = 10485760    # default for agents that set none
    log_keep = 5
    orphans = "adopt"           # or "kill": what to do with a marked process not in pids.json

    [[agents]]
    id = "relay"                # unique; letters, digits, ".", "_", "-"; not "supervisor"
    cmd = "./relay"             # required, non-empty
    args = ["--port", "7777"]
    restart = "always"          # always | on-failure (default) | never
    env = { RUST_LOG = "info" }
    cwd = "services/relay"
    depends_on = []             # ids of agents that must be RUNNING first
    heartbeat = "pipe"          # none (default) | pipe | cluster | a probe table:
    #   { http = "http://127.0.0.1:3338/v1/info", interval = 5, timeout = 2, failures = 3 },
    #   { tcp = "127.0.0.1:7777" } or { exec = ["pg_isready", "-h", "127.0.0.1"] }
    startup_timeout = 30
    stop_timeout = 10
    stop_signal = "SIGTERM"     # a signal name: "SIGTERM", "TERM", "sigint"...
    rlimits = { memory = 268435456, open_files = 1024 }   # bytes / descriptors
    log_max_bytes = 10485760
    log_keep = 5

A JSON manifest (``*.json``) is read with the same rules, as is: its ``agents`` list
holds the same keys and an optional ``supervisor`` object the same defaults; any
other top-level key (``relay_url`` ...) is kept in :attr:`Manifest.extra` and
otherwise ignored. In TOML an unknown top-level key is an error. Inside an agent or
the ``[supervisor]`` table, an unknown key is an error in both formats.

Every error is a :class:`ManifestError` (an ``InvalidInputError``: CLI exit 2) whose
message names the file, the agent and the field:
``fleet.toml: agent user3: restart: must be always, on-failure or never``.
"""

from __future__ import annotations

import json
import math
import re
import signal
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from corral.errors import InvalidInputError
from corral.supervisor.ids import AGENT_ID, RESERVED_IDS
from corral.supervisor.policy import RESTART_POLICIES, RestartConfig

__all__ = [
    "HEARTBEAT_KINDS",
    "ORPHAN_ACTIONS",
    "AgentSpec",
    "Manifest",
    "ManifestError",
    "Probe",
    "Rlimits",
    "Settings",
    "dependents",
    "load_manifest",
    "parse_manifest",
    "phases",
    "stop_phases",
]

HEARTBEAT_KINDS = ("none", "pipe", "cluster")  # and the probe tables (PROBE_KINDS)
PROBE_KINDS = ("http", "tcp", "exec")
ORPHAN_ACTIONS = ("adopt", "kill")
_ENV_KEY = re.compile(r"[^=\x00]+")


class ManifestError(InvalidInputError):
    """A manifest that cannot be run; ``path``, ``agent`` and ``field`` say where."""

    hint = "Fix the manifest and start again."

    def __init__(
        self, path: str, reason: str, *, agent: str | None = None, field: str | None = None
    ) -> None:
        where = [path]
        if agent is not None:
            where.append(f"agent {agent}")
        if field is not None:
            where.append(field)
        super().__init__(": ".join([*where, reason]), field=field)
        self.path = path
        self.agent = agent
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Rlimits:
    """Resource limits applied to the agent's process (``None``: inherited)."""

    memory: int | None = None  # RLIMIT_AS, bytes
    open_files: int | None = None  # RLIMIT_NOFILE


@dataclass(frozen=True, slots=True)
class Settings:
    """The ``[supervisor]`` table: supervisor-wide values and per-agent defaults."""

    heartbeat_interval: float = 5.0
    heartbeat_timeout: float = 15.0
    startup_timeout: float = 30.0
    stop_timeout: float = 10.0
    stop_signal: signal.Signals = signal.SIGTERM
    backoff_base: float = 1.0
    backoff_cap: float = 16.0
    backoff_jitter: float = 0.5
    backoff_reset_after: float = 60.0
    restart_limit: int = 10
    restart_window: float = 300.0
    log_max_bytes: int = 10 * 1024 * 1024
    log_keep: int = 5
    orphans: str = "adopt"

    def restart_config(self) -> RestartConfig:
        """The backoff and restart-limit part, for ``policy.RestartTracker``."""
        return RestartConfig(
            base=self.backoff_base,
            cap=self.backoff_cap,
            jitter=self.backoff_jitter,
            restart_limit=self.restart_limit,
            restart_window=self.restart_window,
            reset_after=self.backoff_reset_after,
        )


@dataclass(frozen=True, slots=True)
class Probe:
    """A probe heartbeat (:mod:`corral.supervisor.probe`): ``kind`` ``http`` (target
    a URL), ``tcp`` (``host:port``) or ``exec`` (an argv tuple), run every
    ``interval`` s, failed when it takes more than ``timeout`` s; ``failures``
    consecutive failures make a running agent UNHEALTHY."""

    kind: str
    target: str | tuple[str, ...]
    interval: float = 5.0
    timeout: float = 2.0
    failures: int = 3


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """One agent, with every default already resolved from :class:`Settings`."""

    id: str
    cmd: str
    args: tuple[str, ...] = ()
    restart: str = "on-failure"
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    cwd: str | None = None
    depends_on: tuple[str, ...] = ()
    heartbeat: str = "none"
    startup_timeout: float = 30.0
    stop_timeout: float = 10.0
    stop_signal: signal.Signals = signal.SIGTERM
    rlimits: Rlimits = field(default_factory=Rlimits)
    log_max_bytes: int = 10 * 1024 * 1024
    log_keep: int = 5
    heartbeat_interval: float = 5.0
    heartbeat_timeout: float = 15.0
    probe: Probe | None = None  # heartbeat "http", "tcp" or "exec"

    @property
    def argv(self) -> list[str]:
        return [self.cmd, *self.args]


@dataclass(frozen=True, slots=True)
class Manifest:
    """A validated manifest: agents in file order, settings, and (JSON only) the
    top-level keys corral does not use."""

    path: str
    agents: tuple[AgentSpec, ...]
    settings: Settings = field(default_factory=Settings)
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(a.id for a in self.agents)

    def agent(self, agent_id: str) -> AgentSpec:
        """The agent named ``agent_id`` (``KeyError`` if none)."""
        for a in self.agents:
            if a.id == agent_id:
                return a
        raise KeyError(agent_id)


# ---- loading ------------------------------------------------------------------------


def load_manifest(path: str | Path) -> Manifest:
    """Read and validate a manifest file: JSON if it ends in ``.json``, else TOML."""
    name = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise ManifestError(name, f"cannot read: {e.strerror or e}") from None
    fmt = "json" if name.endswith(".json") else "toml"
    try:
        text = raw.decode("utf-8")
        data = json.loads(text) if fmt == "json" else tomllib.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, tomllib.TOMLDecodeError) as e:
        raise ManifestError(name, f"not valid {fmt.upper()}: {e}") from None
    return parse_manifest(data, path=name, fmt=fmt)


_SETTINGS_KEYS = frozenset(Settings.__dataclass_fields__)
_AGENT_KEYS = frozenset(
    {
        "id",
        "cmd",
        "args",
        "restart",
        "env",
        "cwd",
        "depends_on",
        "heartbeat",
        "startup_timeout",
        "stop_timeout",
        "stop_signal",
        "rlimits",
        "log_max_bytes",
        "log_keep",
    }
)


def parse_manifest(data: Any, *, path: str = "manifest", fmt: str = "toml") -> Manifest:
    """Validate already-decoded manifest data (``fmt`` ``"toml"`` or ``"json"``
    decides whether unknown top-level keys are errors or kept as ``extra``)."""
    if not isinstance(data, dict):
        raise ManifestError(path, "must be a table with an agents list")
    extra = {k: v for k, v in data.items() if k not in ("agents", "supervisor")}
    if extra and fmt != "json":
        raise ManifestError(path, "unknown key (expected agents, supervisor)", field=min(extra))
    settings = _settings(path, data.get("supervisor", {}))
    agents_raw = data.get("agents")
    if not isinstance(agents_raw, list) or not agents_raw:
        raise ManifestError(path, "must be a non-empty list of agent tables", field="agents")
    agents: list[AgentSpec] = []
    seen: set[str] = set()
    for i, entry in enumerate(agents_raw):
        spec = _agent(path, i, entry, settings)
        if spec.id in seen:
            raise ManifestError(path, "duplicate id", agent=spec.id, field="id")
        seen.add(spec.id)
        agents.append(spec)
    for spec in agents:
        for dep in spec.depends_on:
            if dep not in seen:
                raise ManifestError(path, f"unknown agent {dep}", agent=spec.id, field="depends_on")
    manifest = Manifest(path, tuple(agents), settings, MappingProxyType(extra))
    cycle = _find_cycle(manifest)
    if cycle:
        raise ManifestError(path, "cycle " + " -> ".join(cycle), agent=cycle[0], field="depends_on")
    return manifest


class _Fields:
    """Typed getters over one table that raise errors naming file, agent and field."""

    def __init__(self, path: str, agent: str | None, table: dict[str, Any], prefix: str = ""):
        self.path, self.agent, self.table, self.prefix = path, agent, table, prefix

    def error(self, name: str, reason: str) -> ManifestError:
        return ManifestError(self.path, reason, agent=self.agent, field=self.prefix + name)

    def unknown(self, allowed: frozenset[str]) -> None:
        for key in self.table:
            if key not in allowed:
                raise self.error(key, "unknown key")

    def string(self, name: str, default: str | None, *, choices: tuple[str, ...] = ()) -> Any:
        if name not in self.table:
            return default
        v = self.table[name]
        if choices and v not in choices:
            raise self.error(name, "must be " + _one_of(choices))
        if not isinstance(v, str) or not v or "\x00" in v:
            raise self.error(name, "must be a non-empty string")
        return v

    def seconds(self, name: str, default: float, *, zero: bool = False) -> float:
        v = self.table.get(name, default)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise self.error(name, "must be a number of seconds")
        if v < 0 or (v == 0 and not zero):
            raise self.error(name, "must be " + ("at least 0" if zero else "more than 0"))
        return float(v)

    def integer(self, name: str, default: int | None, *, minimum: int) -> Any:
        v = self.table.get(name, default)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise self.error(name, f"must be an integer of at least {minimum}")
        return v

    def strings(self, name: str) -> tuple[str, ...]:
        v = self.table.get(name, [])
        if not isinstance(v, list) or not all(isinstance(s, str) and "\x00" not in s for s in v):
            raise self.error(name, "must be a list of strings")
        return tuple(v)

    def sig(self, name: str, default: signal.Signals) -> signal.Signals:
        v = self.table.get(name)
        if v is None:
            return default
        if isinstance(v, str):
            key = v.upper()
            key = key if key.startswith("SIG") else "SIG" + key
            sig = getattr(signal.Signals, key, None) if not key.startswith("SIG_") else None
            if isinstance(sig, signal.Signals):
                return sig
        raise self.error(name, "must be a signal name such as SIGTERM or INT")


def _one_of(choices: tuple[str, ...]) -> str:
    return ", ".join(choices[:-1]) + " or " + choices[-1]


def _settings(path: str, raw: Any) -> Settings:
    if not isinstance(raw, dict):
        raise ManifestError(path, "must be a table", field="supervisor")
    f = _Fields(path, None, raw, "supervisor.")
    f.unknown(_SETTINGS_KEYS)
    d = Settings()
    s = Settings(
        heartbeat_interval=f.seconds("heartbeat_interval", d.heartbeat_interval),
        heartbeat_timeout=f.seconds("heartbeat_timeout", d.heartbeat_timeout),
        startup_timeout=f.seconds("startup_timeout", d.startup_timeout),
        stop_timeout=f.seconds("stop_timeout", d.stop_timeout, zero=True),
        stop_signal=f.sig("stop_signal", d.stop_signal),
        backoff_base=f.seconds("backoff_base", d.backoff_base, zero=True),
        backoff_cap=f.seconds("backoff_cap", d.backoff_cap, zero=True),
        backoff_jitter=f.seconds("backoff_jitter", d.backoff_jitter, zero=True),
        backoff_reset_after=f.seconds("backoff_reset_after", d.backoff_reset_after, zero=True),
        restart_limit=f.integer("restart_limit", d.restart_limit, minimum=1),
        restart_window=f.seconds("restart_window", d.restart_window),
        log_max_bytes=f.integer("log_max_bytes", d.log_max_bytes, minimum=1),
        log_keep=f.integer("log_keep", d.log_keep, minimum=0),
        orphans=f.string("orphans", d.orphans, choices=ORPHAN_ACTIONS),
    )
    if s.backoff_cap < s.backoff_base:
        raise f.error("backoff_cap", "must be at least backoff_base")
    if s.heartbeat_timeout < s.heartbeat_interval:
        raise f.error("heartbeat_timeout", "must be at least heartbeat_interval")
    return s


def _agent(path: str, index: int, raw: Any, s: Settings) -> AgentSpec:
    label = f"#{index + 1}"
    if not isinstance(raw, dict):
        raise ManifestError(path, "must be a table", agent=label)
    agent_id = raw.get("id")
    if not isinstance(agent_id, str) or not AGENT_ID.fullmatch(agent_id):
        f = _Fields(path, label if not isinstance(agent_id, str) else agent_id, raw)
        if "id" not in raw:
            raise f.error("id", "is required")
        raise f.error(
            "id", "must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    f = _Fields(path, agent_id, raw)
    if agent_id in RESERVED_IDS:
        raise f.error("id", f"{agent_id} is reserved for the supervisor's own logs")
    f.unknown(_AGENT_KEYS)
    if "cmd" not in raw:
        raise f.error("cmd", "is required")
    env_raw = raw.get("env", {})
    if not isinstance(env_raw, dict):
        raise f.error("env", "must be a table of strings")
    for k, v in env_raw.items():
        if not _ENV_KEY.fullmatch(k) or not isinstance(v, str) or "\x00" in v:
            raise f.error(f"env.{k}", "must be a string (and the name must not contain '=')")
    depends_on = f.strings("depends_on")
    if len(set(depends_on)) != len(depends_on):
        raise f.error("depends_on", "lists an agent twice")
    rl_raw = raw.get("rlimits", {})
    if not isinstance(rl_raw, dict):
        raise f.error("rlimits", "must be a table with memory and/or open_files")
    rf = _Fields(path, agent_id, rl_raw, "rlimits.")
    rf.unknown(frozenset({"memory", "open_files"}))
    probe = _probe(f, raw.get("heartbeat"), s)
    return AgentSpec(
        id=agent_id,
        cmd=f.string("cmd", None),
        args=f.strings("args"),
        restart=f.string("restart", "on-failure", choices=RESTART_POLICIES),
        env=MappingProxyType(dict(env_raw)),
        cwd=f.string("cwd", None),
        depends_on=depends_on,
        heartbeat=probe.kind if probe else f.string("heartbeat", "none", choices=HEARTBEAT_KINDS),
        probe=probe,
        startup_timeout=f.seconds("startup_timeout", s.startup_timeout),
        stop_timeout=f.seconds("stop_timeout", s.stop_timeout, zero=True),
        stop_signal=f.sig("stop_signal", s.stop_signal),
        rlimits=Rlimits(
            memory=rf.integer("memory", None, minimum=1),
            open_files=rf.integer("open_files", None, minimum=1),
        ),
        log_max_bytes=f.integer("log_max_bytes", s.log_max_bytes, minimum=1),
        log_keep=f.integer("log_keep", s.log_keep, minimum=0),
        heartbeat_interval=s.heartbeat_interval,
        heartbeat_timeout=s.heartbeat_timeout,
    )


def _probe(f: _Fields, raw: Any, s: Settings) -> Probe | None:
    if not isinstance(raw, dict):
        return None
    pf = _Fields(f.path, f.agent, raw, "heartbeat.")
    pf.unknown(frozenset({*PROBE_KINDS, "interval", "timeout", "failures"}))
    kinds = [k for k in PROBE_KINDS if k in raw]
    if len(kinds) != 1:
        raise f.error("heartbeat", "a probe table needs exactly one of http, tcp or exec")
    kind = kinds[0]
    target: str | tuple[str, ...]
    if kind == "exec":
        target = pf.strings("exec")
        if not target:
            raise pf.error("exec", "must be a non-empty list of strings")
    else:
        text: str = pf.string(kind, None)
        target = text
        if kind == "http" and not re.fullmatch(r"https?://[^/\s]+(/\S*)?", text):
            raise pf.error("http", "must be an http:// or https:// URL")
        host, _, port = text.rpartition(":")
        if kind == "tcp" and not (host and port.isdigit() and 0 < int(port) < 65536):
            raise pf.error("tcp", "must be host:port")
    timeout = pf.seconds("timeout", min(2.0, s.heartbeat_interval))
    return Probe(
        kind,
        target,
        interval=pf.seconds("interval", s.heartbeat_interval),
        timeout=timeout,
        failures=pf.integer("failures", 3, minimum=1),
    )


# ---- dependency order ---------------------------------------------------------------


def _find_cycle(manifest: Manifest) -> list[str] | None:
    """A dependency cycle as ``[a, b, ..., a]`` (first found in file order), or None."""
    deps = {a.id: a.depends_on for a in manifest.agents}
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in deps[node]:
            if state.get(dep) == 1:
                return [*stack[stack.index(dep) :], dep]
            if dep not in state and (found := walk(dep)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for agent_id in deps:
        if agent_id not in state and (found := walk(agent_id)):
            return found
    return None


def phases(manifest: Manifest) -> list[list[AgentSpec]]:
    """Start order: layer 0 holds agents with no dependencies, layer n those whose
    deepest dependency is in layer n-1. A layer may start once every agent of the
    layers before it is RUNNING; agents keep file order within a layer."""
    layer: dict[str, int] = {}
    by_id = {a.id: a for a in manifest.agents}

    def depth(agent_id: str) -> int:
        if agent_id not in layer:
            deps = by_id[agent_id].depends_on
            layer[agent_id] = 1 + max((depth(d) for d in deps), default=-1)
        return layer[agent_id]

    for a in manifest.agents:
        depth(a.id)
    out: list[list[AgentSpec]] = [[] for _ in range(max(layer.values(), default=-1) + 1)]
    for a in manifest.agents:
        out[layer[a.id]].append(a)
    return out


def stop_phases(manifest: Manifest) -> list[list[AgentSpec]]:
    """Cascade-stop order: the start layers last first, each in reverse file order
    (dependents stop before what they depend on)."""
    return [list(reversed(p)) for p in reversed(phases(manifest))]


def dependents(manifest: Manifest, agent_id: str, *, transitive: bool = True) -> list[AgentSpec]:
    """Agents that depend on ``agent_id`` (directly, or through others when
    ``transitive``), in file order: those that go WAITING while it restarts."""
    found: set[str] = set()
    frontier = {agent_id}
    while frontier:
        nxt = {a.id for a in manifest.agents if frontier & set(a.depends_on)} - found
        found |= nxt
        frontier = nxt if transitive else set()
    return [a for a in manifest.agents if a.id in found]
