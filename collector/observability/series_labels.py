"""The label sets of ``/metrics/fleet``'s series, built once per device identity.

A device's labels (its name, OS hostname, agent id, kind, registration labels, and per GPU its
UUID, model, PCI bus id and driver version) change only when it registers again with other
labels or another inventory, while its readings change every scrape. ``SeriesLabels`` keeps
each device's label texts between scrapes, keyed by everything they are made of: a device whose
labels or inventory changed gets new texts, one that left the fleet is forgotten.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from fleetscope.collector.observability.prom_text import label_set
from fleetscope.collector.query.latest import GpuIdentity, LatestDevice

LABEL_KEY = re.compile(r"[^a-zA-Z0-9_]")

# What a device's label texts are made of: a change in any of it makes new texts.
IdentityKey = tuple[str, str, str, str, str, tuple[GpuIdentity, ...], tuple[tuple[str, str], ...]]


def identity_key(dev: LatestDevice) -> IdentityKey:
    labels = tuple(sorted((str(k), str(v)) for k, v in dev.labels.items()))
    return (dev.name, dev.agent_id, dev.kind, dev.hostname, dev.driver_version, tuple(dev.gpus), labels)


def host_pairs(dev: LatestDevice) -> list[tuple[str, str]]:
    """Which device a series is about: the device's name as ``fleetscope_device`` and as
    dcgm-exporter's ``Hostname`` (unique where OS hostnames are not), the OS hostname apart."""
    return [("fleetscope_device", dev.name), ("Hostname", dev.name), ("os_hostname", dev.hostname)]


def gpu_identity(dev: LatestDevice, gpu_index: int) -> GpuIdentity | None:
    return next((g for g in dev.gpus if g.index == gpu_index), None)


def gpu_pairs(dev: LatestDevice, gpu_index: int) -> list[tuple[str, str]]:
    """dcgm-exporter's labels of one GPU (a Jetson's integrated GPU, without an NVML UUID, is
    ``JETSON-<agent id>``), and the device's name."""
    ident = gpu_identity(dev, gpu_index)
    uuid = ident.uuid if ident is not None and ident.uuid else ""
    if not uuid and dev.kind == "jetson":
        uuid = f"JETSON-{dev.agent_id}"
    return [
        ("gpu", str(gpu_index)),
        ("UUID", uuid),
        ("device", f"nvidia{gpu_index}"),
        ("modelName", ident.name if ident is not None else ""),
        *host_pairs(dev)[1:],
        ("DCGM_FI_DRIVER_VERSION", dev.driver_version),
        ("pci_bus_id", ident.pci_bus_id if ident is not None else ""),
        ("fleetscope_device", dev.name),
    ]


def info_pairs(dev: LatestDevice) -> list[tuple[str, str]]:
    """``fleetscope_device_info``'s labels: the device's, its agent id and kind, and each
    registration label as ``label_<key>`` (a key that sanitises to a taken name is left out)."""
    info = [*host_pairs(dev), ("agent_id", dev.agent_id), ("kind", dev.kind)]
    taken = {k for k, _ in info}
    for k, v in sorted(dev.labels.items()):
        key = "label_" + LABEL_KEY.sub("_", k)
        if key not in taken:
            taken.add(key)
            info.append((key, str(v)))
    return info


class DeviceLabels:
    """One device's label texts (``{k="v",...} ``, bytes): for its info series, its host series
    (with and without ``kind``), each GPU's series and each Jetson point's label set."""

    def __init__(self, dev: LatestDevice) -> None:
        self._dev = dev
        self.info = label_set(info_pairs(dev))
        host = host_pairs(dev)
        self.host = label_set(host)
        self.host_kind = label_set([*host, ("kind", dev.kind)])
        self._gpus: dict[int, bytes] = {}
        self._points: dict[tuple[tuple[str, str], ...], bytes] = {}

    def gpu(self, gpu_index: int) -> bytes:
        text = self._gpus.get(gpu_index)
        if text is None:
            text = self._gpus[gpu_index] = label_set(gpu_pairs(self._dev, gpu_index))
        return text

    def point(self, labels: Mapping[str, str]) -> bytes:
        """The host labels and a point's own (sanitised; one that would shadow a host label is left out)."""
        key = tuple(sorted(labels.items()))
        text = self._points.get(key)
        if text is None:
            host = host_pairs(self._dev)
            taken = {k for k, _ in host}
            extra = sorted((LABEL_KEY.sub("_", k), v) for k, v in key if LABEL_KEY.sub("_", k) not in taken)
            text = self._points[key] = label_set([*host, *extra])
        return text


class SeriesLabels:
    """Every device's ``DeviceLabels``, kept from one scrape to the next while its identity
    (``identity_key``) stays the same. Not thread-safe: the exposition renders under its lock."""

    def __init__(self) -> None:
        self._by_key: dict[IdentityKey, DeviceLabels] = {}
        self.built = 0  # DeviceLabels made so far (a device new or changed): what a test can watch

    def of(self, devices: Sequence[LatestDevice]) -> list[DeviceLabels]:
        """Each device's label texts, in order; devices not among ``devices`` are forgotten."""
        kept: dict[IdentityKey, DeviceLabels] = {}
        out = []
        for dev in devices:
            key = identity_key(dev)
            texts = kept.get(key) or self._by_key.get(key)
            if texts is None:
                texts = DeviceLabels(dev)
                self.built += 1
            kept[key] = texts
            out.append(texts)
        self._by_key = kept
        return out


__all__ = ["DeviceLabels", "SeriesLabels", "gpu_pairs", "host_pairs", "identity_key", "info_pairs"]
