"""The fleet manifest: the supervisor's manifest plus pools, the cluster and the board.

    [cluster]
    url = "postgresql://…"          # optional: default the embedded SQLite store
    settings = { max_agents = 6, idle_timeout_seconds = 5 }   # applied at start

    [board]
    seed = "tasks.jsonl"            # tasks loaded at start, when the board is empty

    [alerts]                        # the cluster's alert_* settings, applied at start
    webhooks = ["https://hooks.example/corral"]
    rate_limit_seconds = 300        # and retry_attempts, retry_delay,
                                    # crash_loop_restarts, crash_loop_window,
                                    # spawn_pending_seconds (docs/alerts.md)

    [[agents]]                      # exactly as for corral supervise
    id = "relay"
    cmd = "./relay"
    heartbeat = "pipe"

    [[pools]]
    id = "dev"                      # members are dev-1, dev-2, …
    cmd = "corral"
    args = ["worker", "--", "./handle.sh"]
    env = { LOG = "1" }
    role = "developer"
    min = 0
    max = 3
    cooldown = 10                   # seconds before a scale change reversing the last
    scale = "auto"                  # off | ask | auto
    depends_on = ["relay"]          # and cwd, heartbeat, stop_timeout, stop_signal,
                                    # rlimits, log_max_bytes, log_keep as for an agent

A pool member is an agent (``restart = "on-failure"``) whose environment also has
``CORRAL_POOL`` and ``CORRAL_ROLE``. Every error is a ``ManifestError`` (CLI exit 2)
naming the file, the agent or pool, and the field:
``fleet.toml: pool dev: max: must be at least min``; a seed file's errors name the
seed file and its line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from corral.defaults import MAX_ID_LENGTH
from corral.errors import InvalidInputError
from corral.scaling import SCALE_MODES, PoolLimits
from corral.supervisor.manifest import (
    AgentSpec,
    Manifest,
    ManifestError,
    _agent,
    _Fields,
    _settings,
    parse_manifest,
)

__all__ = [
    "FleetManifest",
    "PoolSpec",
    "check_commands",
    "check_roles",
    "load_fleet",
    "parse_fleet",
    "read_seed",
]

_POOL_KEYS = frozenset({"id", "role", "min", "max", "cooldown", "scale", "model"})
_AGENT_LIKE = frozenset(
    {
        "cmd",
        "args",
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
_TOP = ("agents", "supervisor", "pools", "cluster", "board", "alerts")
_ROLE = re.compile(r"[a-z][a-z0-9_-]{0,63}")
_MEMBER = re.compile(r"(.+)-[0-9]+")


class PoolError(ManifestError):
    """A pool that cannot be run: the message names the file, the pool and the field."""

    def __init__(self, path: str, reason: str, *, pool: str, field: str | None = None) -> None:
        where = [path, f"pool {pool}", *([field] if field else [])]
        InvalidInputError.__init__(self, ": ".join([*where, reason]), field=field)
        self.path, self.agent, self.reason = path, None, reason
        self.pool = pool


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """One pool: its bounds, its role and the agent its members are made from."""

    id: str
    role: str
    limits: PoolLimits
    template: AgentSpec  # id = the pool's id; members differ by id only
    model: str | None = None  # the model its members run (model_caps and model budgets)

    def member(self, n: int) -> AgentSpec:
        """The spec of member ``n`` (``<pool>-<n>``)."""
        return replace(self.template, id=f"{self.id}-{n}")


@dataclass(frozen=True, slots=True)
class FleetManifest:
    """A validated fleet manifest. ``seed`` is an absolute path (or None)."""

    path: str
    supervisor: Manifest
    pools: tuple[PoolSpec, ...] = ()
    cluster_url: str | None = None
    cluster_settings: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    seed: str | None = None

    @property
    def directory(self) -> Path:
        return Path(self.path).resolve().parent

    def pool_of(self, agent_id: str) -> PoolSpec | None:
        """The pool whose member ``agent_id`` is (None: a manifest agent or unknown)."""
        m = _MEMBER.fullmatch(agent_id)
        if m is None:
            return None
        return next((p for p in self.pools if p.id == m.group(1)), None)


def load_fleet(path: str | Path) -> FleetManifest:
    """Read and validate a fleet manifest (TOML)."""
    name = str(path)
    try:
        text = Path(path).read_bytes().decode("utf-8")
        data = tomllib.loads(text)
    except OSError as e:
        raise ManifestError(name, f"cannot read: {e.strerror or e}") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ManifestError(name, f"not valid TOML: {e}") from None
    return parse_fleet(data, path=name)


def parse_fleet(data: Any, *, path: str = "corral.toml") -> FleetManifest:
    """Validate decoded fleet manifest data (see the module docstring)."""
    if not isinstance(data, dict):
        raise ManifestError(path, "must be a table")
    unknown = sorted(set(data) - set(_TOP))
    if unknown:
        expected = "unknown key (expected " + ", ".join(_TOP) + ")"
        raise ManifestError(path, expected, field=unknown[0])
    if not data.get("agents") and not data.get("pools"):
        raise ManifestError(path, "needs at least one [[agents]] or [[pools]] table")
    if data.get("agents"):
        sup = parse_manifest(
            {k: v for k, v in data.items() if k in ("agents", "supervisor")}, path=path
        )
    else:
        if "agents" in data and not isinstance(data["agents"], list):
            raise ManifestError(path, "must be a list of agent tables", field="agents")
        sup = Manifest(path, (), _settings(path, data.get("supervisor", {})))
    pools = _pools(path, data.get("pools", []), sup)
    url, settings = _cluster(path, data.get("cluster", {}))
    for name, value in _alerts(path, data.get("alerts", {})).items():
        if name in settings:
            raise ManifestError(
                path, f"given twice (also as cluster.settings.{name})", field=_alert_key(name)
            )
        settings[name] = value
    return FleetManifest(
        path, sup, pools, url, MappingProxyType(settings), _board(path, data.get("board", {}))
    )


def _pools(path: str, raw: Any, sup: Manifest) -> tuple[PoolSpec, ...]:
    if not isinstance(raw, list):
        raise ManifestError(path, "must be a list of pool tables", field="pools")
    out: list[PoolSpec] = []
    for i, entry in enumerate(raw):
        label = f"#{i + 1}"
        if not isinstance(entry, dict):
            raise PoolError(path, "must be a table", pool=label)
        pool_id: str = entry["id"] if isinstance(entry.get("id"), str) else label
        f = _Fields(path, None, entry)
        for key in entry:
            if key not in _POOL_KEYS | _AGENT_LIKE:
                raise PoolError(path, "unknown key", pool=pool_id, field=key)
        try:
            agent_like = {k: v for k, v in entry.items() if k in _AGENT_LIKE}
            template = _agent(path, i, {"id": entry.get("id"), **agent_like}, sup.settings)
            pid = template.id
            if "role" not in entry:
                raise f.error("role", "is required")
            role = f.string("role", None)
            if not _ROLE.fullmatch(role):
                raise f.error("role", "must be a lower-case role name (letters, digits, _ or -)")
            model = f.string("model", None)
            lo = f.integer("min", 0, minimum=0)
            hi = f.integer("max", max(lo, 1), minimum=1)
            if hi < lo:
                raise f.error("max", "must be at least min")
            if len(f"{pid}-{hi}") > MAX_ID_LENGTH:  # a member's node id, as the cluster checks it
                longest = f"member ids ({pid}-1 .. {pid}-{hi}) must be at most {MAX_ID_LENGTH}"
                raise f.error("max", f"{longest} characters: a shorter id or a lower max")
            limits = PoolLimits(
                min=lo,
                max=hi,
                cooldown=f.seconds("cooldown", 10.0, zero=True),
                scale=f.string("scale", "auto", choices=SCALE_MODES),
            )
        except ManifestError as e:
            if isinstance(e, PoolError):
                raise
            raise PoolError(path, e.reason, pool=pool_id, field=e.field) from None
        if pid in sup.ids or any(p.id == pid for p in out):
            raise PoolError(path, "duplicate id (an agent or pool has it)", pool=pid, field="id")
        for a in sup.ids:
            m = _MEMBER.fullmatch(a)
            if m is not None and m.group(1) == pid:
                raise PoolError(path, f"agent {a} has a member's name", pool=pid, field="id")
        for dep in template.depends_on:
            if dep not in sup.ids:
                raise PoolError(path, f"unknown agent {dep}", pool=pid, field="depends_on")
        env = {**template.env, "CORRAL_POOL": pid, "CORRAL_ROLE": role}
        if model is not None:
            env["CORRAL_MODEL"] = model
        template = replace(template, restart="on-failure", env=MappingProxyType(env))
        out.append(PoolSpec(pid, role, limits, template, model))
    return tuple(out)


def check_commands(fleet: FleetManifest, environ: Mapping[str, str] | None = None) -> None:
    """Every pool's (and agent's) command can be started as the supervisor starts it:
    its ``cwd`` a directory (relative to the manifest's), a ``cmd`` with a ``/`` an
    executable file there, any other ``cmd`` an executable on the ``PATH`` it will
    have (its ``env``'s, else ``environ``'s). The first that cannot is a
    ``ManifestError`` naming the file, the pool or agent, and the field."""
    base = os.environ if environ is None else environ
    for p in fleet.pools:
        problem = _command_problem(p.template, fleet.directory, base)
        if problem is not None:
            raise PoolError(fleet.path, problem[1], pool=p.id, field=problem[0])
    for a in fleet.supervisor.agents:
        problem = _command_problem(a, fleet.directory, base)
        if problem is not None:
            raise ManifestError(fleet.path, problem[1], agent=a.id, field=problem[0])


def _command_problem(
    spec: AgentSpec, directory: Path, environ: Mapping[str, str]
) -> tuple[str, str] | None:
    """(field, reason) when ``spec``'s command cannot be started, else None."""
    cwd = directory if spec.cwd is None else directory / spec.cwd
    if not cwd.is_dir():
        return "cwd", f"{spec.cwd}: no such directory"
    if "/" in spec.cmd:
        exe = cwd / spec.cmd
        if not exe.is_file():
            return "cmd", f"{spec.cmd}: no such file (in {cwd})"
        if not os.access(exe, os.X_OK):
            return "cmd", f"{spec.cmd}: not executable (chmod +x)"
    elif shutil.which(spec.cmd, path=spec.env.get("PATH", environ.get("PATH"))) is None:
        return "cmd", f"{spec.cmd}: not found on PATH (give its path, or fix PATH)"
    return None


def check_roles(fleet: FleetManifest, roles: tuple[str, ...]) -> None:
    """Every pool's role is one the cluster accepts (``roles``: its settings' roles,
    with the manifest's ``role_keywords`` applied); else a ``ManifestError`` naming
    the file, the pool and ``role``."""
    for p in fleet.pools:
        if p.role not in roles:
            reason = f"{p.role}: not a role of the cluster (one of {', '.join(roles)})"
            raise PoolError(fleet.path, reason, pool=p.id, field="role")


def _cluster(path: str, raw: Any) -> tuple[str | None, dict[str, Any]]:
    if not isinstance(raw, dict):
        raise ManifestError(path, "must be a table", field="cluster")
    for key in raw:
        if key not in ("url", "settings"):
            raise ManifestError(path, "unknown key", field=f"cluster.{key}")
    url = raw.get("url")
    stores = ("sqlite:", "postgres")
    if url is not None and (not isinstance(url, str) or not url.startswith(stores)):
        raise ManifestError(
            path,
            "must be a sqlite:/// or postgresql:// url (corral up serves it)",
            field="cluster.url",
        )
    settings = raw.get("settings", {})
    if not isinstance(settings, dict):
        raise ManifestError(path, "must be a table of cluster settings", field="cluster.settings")
    from corral.model import Settings

    known = set(Settings.__dataclass_fields__)
    for key in settings:
        if key not in known:
            raise ManifestError(path, "unknown setting", field=f"cluster.settings.{key}")
    return url, dict(settings)


def _alert_key(name: str) -> str:
    return "alerts." + name.removeprefix("alert_")


def _alerts(path: str, raw: Any) -> dict[str, Any]:
    """The ``[alerts]`` table as the cluster's ``alert_*`` settings, each checked by
    the settings' own rule (``corral.config.check_changes``)."""
    from corral.alerts import MANIFEST_KEYS
    from corral.config import check_changes

    if not isinstance(raw, dict):
        raise ManifestError(path, "must be a table", field="alerts")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = MANIFEST_KEYS.get(key)
        if name is None:
            known = ", ".join(sorted(MANIFEST_KEYS))
            raise ManifestError(path, f"unknown key (expected {known})", field=f"alerts.{key}")
        try:
            out.update(check_changes({name: value}))
        except InvalidInputError as e:
            reason = str(e.message).removeprefix(name).lstrip(": ")
            raise ManifestError(path, reason, field=_alert_key(name)) from None
    return out


def _board(path: str, raw: Any) -> str | None:
    if not isinstance(raw, dict):
        raise ManifestError(path, "must be a table", field="board")
    for key in raw:
        if key != "seed":
            raise ManifestError(path, "unknown key", field=f"board.{key}")
    seed = raw.get("seed")
    if seed is None:
        return None
    if not isinstance(seed, str) or not seed:
        raise ManifestError(path, "must be the path of a JSON-lines file", field="board.seed")
    full = Path(path).resolve().parent / seed
    read_seed(full)  # errors name the seed file and its line
    return str(full)


def read_seed(path: str | Path) -> list[dict[str, Any]]:
    """The tasks of a seed file: one JSON object per line (``add_task``'s arguments:
    title, description, priority, role, max_attempts); blank lines and lines
    starting with ``#`` are skipped."""
    name = str(path)
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError(name, f"cannot read: {getattr(e, 'strerror', None) or e}") from None
    tasks = []
    for n, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            item = json.loads(line)
        except ValueError as e:
            raise ManifestError(name, f"not JSON: {e}", field=f"line {n}") from None
        if not isinstance(item, dict) or not isinstance(item.get("title"), str):
            raise ManifestError(name, "must be an object with a title", field=f"line {n}")
        extra = set(item) - {"title", "description", "priority", "role", "max_attempts"}
        if extra:
            raise ManifestError(name, "unknown key", field=f"line {n}: {min(extra)}")
        tasks.append(item)
    return tasks
