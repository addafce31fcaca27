"""Which of the Compare page's choices its pickers list, in a fleet too large to list them all.

``device_groups`` offers every model, GPU, kind and label, and every device on its own
(``device: <name>``). Up to ``LIST_EVERY_DEVICE_UP_TO`` devices each picker lists them all; in a
larger fleet (10,000 options per picker took the browser seconds to draw, on every visit) a
picker lists the ready-made groups, the devices already picked, and the devices whose name
contains what was typed in its search box (the first ``FOUND_AT_MOST``).
"""

from __future__ import annotations

from collections.abc import Sequence

DEVICE_PREFIX = "device: "
LIST_EVERY_DEVICE_UP_TO = 300
FOUND_AT_MOST = 50


def every_device_listed(options: Sequence[str]) -> bool:
    return sum(o.startswith(DEVICE_PREFIX) for o in options) <= LIST_EVERY_DEVICE_UP_TO


def matching_devices(options: Sequence[str], search: str) -> list[str]:
    """The ``device: `` options whose name contains ``search`` (any case), in their order."""
    needle = search.strip().lower()
    if not needle:
        return []
    return [o for o in options if o.startswith(DEVICE_PREFIX) and needle in o[len(DEVICE_PREFIX) :].lower()]


def shown_options(options: Sequence[str], *, picked: Sequence[str], search: str) -> list[str]:
    """What a picker lists: the groups that are not single devices, the picks (a picker drops a
    pick that is not among its options), then the first ``FOUND_AT_MOST`` devices found."""
    known = set(options)
    listed = dict.fromkeys(o for o in options if not o.startswith(DEVICE_PREFIX))
    listed.update(dict.fromkeys(p for p in picked if p in known))
    listed.update(dict.fromkeys(matching_devices(options, search)[:FOUND_AT_MOST]))
    return list(listed)


__all__ = ["FOUND_AT_MOST", "LIST_EVERY_DEVICE_UP_TO", "every_device_listed", "matching_devices", "shown_options"]
