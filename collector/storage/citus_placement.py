"""On Citus: which worker holds a device's shards, so the writer commits each worker's batches apart.

A group of batches from devices on both workers was one distributed transaction: committed on
both in two phases, and failed whole while either was stopped, so a worker's stop stalled the
devices on the other one too. The writer splits each group by the node group of its devices'
shards (``gpu_samples``' placement: every per-device table is co-located with it,
``storage.citus``): a batch's claim and rows still commit in one transaction on one worker, and
a stopped worker fails only its own devices' batches, whose agents spool and resend.

A device's shard never changes (its hash range is fixed); a shard's node changes when an operator
rebalances or moves it, so the shard-to-node map is read again every ``refresh_s``. A split that
is stale only costs a transaction that spans two workers, as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from fleetscope.collector.storage.citus import ANCHOR

log = logging.getLogger(__name__)


class DevicePlacement:
    """Device id -> the node group holding its shards, read through one cursor of the caller's."""

    def __init__(self, refresh_s: float = 30.0) -> None:
        self.refresh_s = refresh_s
        self._shard_of: dict[int, int] = {}
        self._group_of_shard: dict[int, int] = {}
        self._read_at = float("-inf")

    def groups(self, cur, device_ids: Iterable[int]) -> dict[int, int]:  # type: ignore[no-untyped-def]
        """Each device's node group (read in the cursor's transaction, which the caller ends)."""
        ids = sorted(set(device_ids))
        unknown = [d for d in ids if d not in self._shard_of]
        if unknown:
            cur.execute(
                "SELECT d, get_shard_id_for_distribution_column(%s, d) FROM unnest(%s::integer[]) AS d",
                (ANCHOR, unknown),
            )
            self._shard_of.update((int(d), int(s)) for d, s in cur.fetchall())
        now = time.monotonic()
        if now - self._read_at >= self.refresh_s or any(self._shard_of[d] not in self._group_of_shard for d in ids):
            cur.execute(
                "SELECT p.shardid, p.groupid FROM pg_dist_placement p JOIN pg_dist_shard s USING (shardid)"
                " WHERE s.logicalrelid = CAST(%s AS regclass)",
                (ANCHOR,),
            )
            self._group_of_shard = {int(s): int(g) for s, g in cur.fetchall()}
            self._read_at = now
        return {d: self._group_of_shard.get(self._shard_of[d], -1) for d in ids}


__all__ = ["DevicePlacement"]
