"""Noticing that the table was deleted and created again under a running process (docs/errors.md).

The version record carries a `table_id`, drawn once when the record is first written (by
`create_table`, `zae-limiter local up`, a deployment's first version record write) and never
changed. `Repository.open` reads it. A table deleted and created again under the same name (an
in-memory engine started again by `local up`) has another: a process still running would write
to a namespace id that is not registered there and admit against limits that are gone.

`confirm` reads the version record and the namespace's registry item (one strongly consistent
BatchGetItem) and raises `TableRecreatedError` (another table) or `NamespaceNotFoundError` (the
namespace was deleted). It costs nothing on the warm path: it runs only where evidence arrives
(a write to a live bucket item finding no item, a config level this process saw gone on a fresh
read), and, at most once per config cache lifetime, where a resource resolves to no limits.
"""

from __future__ import annotations

from collections.abc import Callable

from .dynamo import keys, records
from .dynamo.store import Store
from .errors import NamespaceNotFoundError, TableRecreatedError


class TableIdentity:
    """The table and namespace one repository scope opened, and the check they are still there."""

    def __init__(
        self,
        store: Store,
        table_id: str | None,
        namespace_id: str,
        namespace_name: str,
        clock: Callable[[], int],
        interval_ms: int,
    ) -> None:
        self.store = store
        self.table_id = table_id
        self.namespace_id = namespace_id
        self.namespace_name = namespace_name
        self.clock = clock
        self.interval_ms = interval_ms
        self._confirmed_at: int | None = None

    async def confirm(self) -> None:
        """Raise if the table is not the one opened, or the namespace is gone from it."""
        version_key = keys.version_record()
        found = await self.store.batch_get(
            [version_key, keys.namespace_by_id(self.namespace_id)], consistent=True
        )
        record = next((i for i in found if i["PK"] == version_key["PK"]), None)
        registered = next((i for i in found if i["PK"] != version_key["PK"]), None)
        now_id = None if record is None else record.get("table_id")
        if record is None or now_id != self.table_id:
            raise TableRecreatedError(
                self.store.table,
                self.namespace_name,
                self.namespace_id,
                opened=self.table_id,
                found=None if record is None else str(now_id),
            )
        if registered is None or registered.get("status") != records.NAMESPACE_ACTIVE:
            raise NamespaceNotFoundError(self.namespace_name)
        self._confirmed_at = self.clock()

    async def confirm_now_and_then(self) -> None:
        """`confirm`, unless it passed within the last `interval_ms` (for evidence that is
        usually innocent, such as an unmetered resource)."""
        now = self.clock()
        if self._confirmed_at is None or not 0 <= now - self._confirmed_at < self.interval_ms:
            await self.confirm()
