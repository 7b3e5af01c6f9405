"""What the SQL store's mixins (duties, views, processes) use of ``SQLStore``, their
host, declared once for the type checker. At run time the class is empty: the
methods are ``SQLStore``'s own, and mypy checks them against these declarations."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from corral.model import Event, Settings, Task
    from corral.store.base import TaskSpec
    from corral.store.rows import Tx

__all__ = ["SQLHost"]


class SQLHost:
    """The base of every ``SQLStore`` mixin."""

    if TYPE_CHECKING:

        def _write(self) -> AbstractContextManager[Tx]: ...
        def _write_redone(self) -> AbstractContextManager[Tx]: ...
        def _capturing(self) -> AbstractContextManager[list[Event]]: ...
        def _read(self) -> AbstractContextManager[Tx]: ...
        def _read_latest(self, single: bool = False) -> AbstractContextManager[Tx]: ...
        def _read_row(self, name: str, **params: Any) -> Sequence[Any] | None: ...
        def _settings_now(self, version: Any) -> Settings: ...
        def _settings_in(self, tx: Tx) -> Settings: ...
        def _meta(self, tx: Tx, key: str) -> dict[str, Any]: ...
        def _live(self, tx: Tx, node_id: str, query: str = "node_live") -> Any: ...
        def _event(
            self,
            tx: Tx,
            now: float,
            kind: str,
            node_id: str | None = None,
            task_id: int | None = None,
            **data: Any,
        ) -> None: ...
        def _enqueue(
            self, tx: Tx, task_id: int, sort_key: float, created_at: float, roles: str
        ) -> None: ...
        def _insert_task(self, tx: Tx, spec: TaskSpec, s: Settings, now: float) -> Any: ...
        def _release_all(
            self, tx: Tx, node: Any, now: float, *, kind: str, counts: bool, **data: Any
        ) -> list[Task]: ...
