"""SQLite's completions leave their usage on their tasks' rows, and their events mark
them (``sqldb.UsageTail``; docs/guardrails.md, "Usage and spend").

A completion with usage adds it to its task's sums in its own statement and keeps it
as the completion's report on the task's row (``usage_last_*``); the
``task_completed`` event the statement writes anyway is the same as without usage: no
more pages and no more work in the completion trigger than a completion without.
``roll_up`` adds the reports of the completion events past its mark to their nodes'
hours (``usage_hours``) in batches, with the role and model of the node's latest row
(a registration that would change them rolls up first:
``sqlusage.before_registration``), and keeps the last event seq it has looked past in
``meta`` (``usage_rolled``); the readers add the reports past it (``rows``), read in
the same snapshot, so the sums are exact whenever they are read. The events after the
mark are read by the seq (the rowid): a new event's seq is past every seq in the
table, and the events' pruning keeps the newest event and rolls up first
(``sqlduties.prune_events``)."""

from __future__ import annotations

from typing import Any

from corral.store import sqlusage
from corral.store.rows import Tx
from corral.store.sqldb import meta_int

__all__ = ["CompletionEvents"]

_ROLLED = "usage_rolled"  # meta: the last event seq the roll-up has looked past


class CompletionEvents:
    """``sqldb.UsageTail`` over the completion events (queries ``usage_tail`` and
    ``usage_add_sums``)."""

    def rows(self, tx: Tx, limit: int) -> list[Any]:
        return tx.all("usage_tail", after=meta_int(tx, _ROLLED) or 0, limit=limit)

    def roll_up(self, tx: Tx, limit: int) -> int:
        after = meta_int(tx, _ROLLED) or 0
        rows = tx.all("usage_tail", after=after, limit=limit)
        sums: dict[tuple[float, str, str, str, str | None], list[int]] = {}
        for p in sqlusage.pending(rows):
            acc = sums.setdefault(p[:5], [0, 0, 0, 0])
            acc[0] += p[5]
            acc[1] += p[6]
            acc[2] += p[7]
            acc[3] += 1
        for (hour, node_id, role, model, pool), (i, o, c, n) in sums.items():
            tx.run(
                "usage_add_sums",
                hour=hour,
                node_id=node_id,
                role=role,
                model=model,
                pool=pool,
                input_tokens=i,
                output_tokens=o,
                cost_micros=c,
                reports=n,
            )
        if len(rows) == limit:
            last = int(rows[-1]["seq"])
        else:  # past every event so far: the next tail starts at the next one
            found = tx.one("events_last")
            last = after if found is None else max(after, int(found["seq"]))
        if last != after:
            tx.run("meta_put", key=_ROLLED, value=str(last))
        return len(rows)
