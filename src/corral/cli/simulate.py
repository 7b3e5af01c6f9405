"""``corral simulate``: a task trace replayed through corral's scaling and its peers'."""

from __future__ import annotations

import json
import math
import os
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import click

from corral.errors import InvalidInputError

__all__ = ["register"]

_WAITS = ("all", "high", "medium", "low")


def _policies(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> list[str]:
    from corral.simulate import POLICIES

    if not value:
        return list(POLICIES)
    out: list[str] = []
    for item in value:
        for name in item.split(","):
            name = name.strip()
            if name not in POLICIES:
                raise click.BadParameter(
                    f"unknown policy {name!r}; one of {', '.join(POLICIES)}", ctx, param
                )
            if name not in out:
                out.append(name)
    return out


def _table(results: dict[str, Any], markdown: bool) -> str:
    head = [
        "policy",
        "idle worker-s",
        "busy worker-s",
        "start-up worker-s",
        "wait p50/p95/p99 s",
        "high p95 s",
        "low p95 s",
        "cap breaches",
        "scale actions",
        "reversals",
        "max reversals per cooldown",
        "cost",
    ]
    rows = []
    for r in results.values():
        w = r.wait
        rows.append(
            [
                r.policy,
                f"{r.idle_worker_seconds:,.0f}",
                f"{r.busy_worker_seconds:,.0f}",
                f"{r.startup_worker_seconds:,.0f}",
                f"{w['all']['p50']:.1f} / {w['all']['p95']:.1f} / {w['all']['p99']:.1f}",
                f"{w['high']['p95']:.1f}",
                f"{w['low']['p95']:.1f}",
                str(r.cap_breaches),
                str(r.scale_actions),
                str(r.reversals),
                f"{r.max_reversals_per_cooldown} ({r.cooldown:g} s)",
                f"{r.cost:,.2f}",
            ]
        )
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return "\n".join([fmt.format(*head)] + [fmt.format(*row) for row in rows])


def _params(**given: Any) -> Any:
    from corral.simulate import Params

    names = {f.name for f in fields(Params)}
    return replace(Params(), **{k: v for k, v in given.items() if k in names and v is not None})


class _Number(click.ParamType[float]):
    """A finite number from ``low`` (above it with ``open_low``); a bad one is a usage
    error naming the option."""

    name = "number"

    def __init__(self, low: float, *, open_low: bool = False) -> None:
        self.low = low
        self.open_low = open_low

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        bad = number <= self.low if self.open_low else number < self.low
        if not math.isfinite(number) or bad:
            side = "above" if self.open_low else "from"
            self.fail(f"must be a number {side} {self.low:g}; got {value}", param, ctx)
        return number


def _float(low: float, *, open_low: bool = False) -> _Number:
    return _Number(low, open_low=open_low)


def register(group: click.Group) -> None:
    @group.command("simulate")
    @click.argument("traces", nargs=-1, required=True, metavar="TRACE.jsonl...")
    @click.option(
        "--policy",
        "policies",
        multiple=True,
        callback=_policies,
        help="Policies to run, comma-separated or repeated: corral, fixed, keda, "
        "dbos, dask, manager, oracle (a clairvoyant plan, not deployable) (default: all).",
    )
    @click.option(
        "--max",
        "max_",
        type=click.IntRange(1, 10_000),
        default=None,
        help="Each pool's ceiling (default 8).",
    )
    @click.option(
        "--max-agents",
        type=click.IntRange(1, 10_000),
        default=None,
        help="The cluster's cap on live nodes (default 8).",
    )
    @click.option(
        "--startup",
        type=_float(0),
        default=None,
        help="Seconds from a worker's spawn to its first claim (default 10).",
    )
    @click.option(
        "--stop",
        type=_float(0),
        default=None,
        help="Seconds a stopping worker is still paid for (default 2).",
    )
    @click.option(
        "--price", type=_float(0), default=None, help="Price of a worker-minute (default 0.01)."
    )
    @click.option(
        "--idle-timeout",
        type=_float(0),
        default=None,
        help="corral's idle_timeout_seconds (default the cluster's, 30).",
    )
    @click.option(
        "--reserve",
        type=click.IntRange(0, 10_000),
        default=None,
        help="Idle members corral's pool keeps past its pending tasks, each till the idle "
        "timeout; the others retire at once (default the service's, 1).",
    )
    @click.option(
        "--cooldown", type=_float(0), default=None, help="corral's pool cooldown (default 10)."
    )
    @click.option(
        "--keda-target",
        type=_float(0, open_low=True),
        default=None,
        help="KEDA's target queue length per replica (default 1).",
    )
    @click.option(
        "--keda-poll",
        type=_float(0, open_low=True),
        default=None,
        help="KEDA's pollingInterval (default 30).",
    )
    @click.option(
        "--keda-cooldown",
        type=_float(0),
        default=None,
        help="KEDA's scale-down cooldown (default 300).",
    )
    @click.option(
        "--dbos-concurrency",
        type=click.IntRange(1, 10_000),
        default=None,
        help="DBOS's worker concurrency (default 1).",
    )
    @click.option(
        "--oracle-wait",
        type=_float(0),
        default=None,
        help="The oracle's wait budget in seconds (default: DBOS's p95 wait on the trace).",
    )
    @click.option(
        "--drain",
        type=_float(0),
        default=None,
        help="Seconds each run goes on after its last completion (default 900).",
    )
    @click.option(
        "--plot",
        "plot_dir",
        type=click.Path(file_okay=False),
        default=None,
        help="Write TRACE.png per trace into this folder (needs corral[sim]).",
    )
    @click.option("--markdown", is_flag=True, help="Print the tables as Markdown.")
    @click.option(
        "--check",
        is_flag=True,
        help="Exit 1 when corral misses the acceptance against KEDA and DBOS "
        "(the oracle's and the bound's notes never fail it).",
    )
    @click.option("--json", "as_json", is_flag=True, help="Print JSON.")
    def simulate_cmd(
        traces: tuple[str, ...],
        policies: list[str],
        max_: int | None,
        plot_dir: str | None,
        markdown: bool,
        check: bool,
        as_json: bool,
        **knobs: Any,
    ) -> int:
        """Replay task traces (JSON lines: arrival, role, priority, duration) on a
        simulated clock through corral's scaling policy and its peers': idle and busy
        worker-seconds, task wait by priority, cap breaches, scale actions and
        reversals, cost; see docs/economics.md."""
        from corral import simulate as sim

        params = _params(max=max_, **knobs)
        if plot_dir is not None:
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                raise InvalidInputError(
                    "needs matplotlib: pip install 'corral[sim]' (or run without --plot)",
                    field="--plot",
                ) from None
        loaded = [(path, sim.load_trace(path)) for path in traces]
        report: dict[str, Any] = {}
        missed = False
        for n, (path, tasks) in enumerate(loaded):
            results, runs = sim.simulate_all(tasks, policies, params)
            checks = sim.acceptance(results)
            missed = missed or not all(c.ok for c in checks)
            checks += sim.reach_checks(tasks, results, params)
            name = Path(path).stem
            entry: dict[str, Any] = {
                "trace": path,
                "tasks": len(tasks),
                "results": {k: r.to_dict() for k, r in results.items()},
                "acceptance": [
                    {"who": c.who, "what": c.what, "detail": c.detail, "ok": c.ok} for c in checks
                ],
            }
            if plot_dir is not None:
                os.makedirs(plot_dir, exist_ok=True)
                png = os.path.join(plot_dir, f"{name}.png")
                sim.plot(f"{name}: {len(tasks)} tasks", tasks, runs, png)
                entry["plot"] = png
            report[name] = entry
            if as_json:
                continue
            if n:
                click.echo()
            horizon = next(iter(results.values())).horizon
            title = f"{name} ({len(tasks)} tasks, horizon {horizon:,.0f} s)"
            click.echo(f"### {title}\n" if markdown else title)
            click.echo(_table(results, markdown))
            for c in checks:
                mark = ("ok" if c.ok else "MISSED") if c.who == "corral" else "note"
                click.echo(f"{'- ' if markdown else '  '}{mark}: {c.who} {c.what}: {c.detail}")
        if as_json:
            click.echo(json.dumps({"params": _asdict(params), "traces": report}, indent=2))
        return 1 if check and missed else 0


def _asdict(params: Any) -> dict[str, Any]:
    return {f.name: getattr(params, f.name) for f in fields(params)}
