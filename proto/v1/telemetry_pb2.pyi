from collections.abc import Iterable as _Iterable
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar

from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper

DESCRIPTOR: _descriptor.FileDescriptor

class DeviceKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEVICE_KIND_UNSPECIFIED: _ClassVar[DeviceKind]
    DEVICE_KIND_SERVER: _ClassVar[DeviceKind]
    DEVICE_KIND_JETSON: _ClassVar[DeviceKind]
    DEVICE_KIND_OTHER: _ClassVar[DeviceKind]

class Level(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LEVEL_UNSPECIFIED: _ClassVar[Level]
    LEVEL_DEBUG: _ClassVar[Level]
    LEVEL_INFO: _ClassVar[Level]
    LEVEL_WARNING: _ClassVar[Level]
    LEVEL_ERROR: _ClassVar[Level]
    LEVEL_CRITICAL: _ClassVar[Level]
DEVICE_KIND_UNSPECIFIED: DeviceKind
DEVICE_KIND_SERVER: DeviceKind
DEVICE_KIND_JETSON: DeviceKind
DEVICE_KIND_OTHER: DeviceKind
LEVEL_UNSPECIFIED: Level
LEVEL_DEBUG: Level
LEVEL_INFO: Level
LEVEL_WARNING: Level
LEVEL_ERROR: Level
LEVEL_CRITICAL: Level

class Column(_message.Message):
    __slots__ = ("values", "null_rows")
    VALUES_FIELD_NUMBER: _ClassVar[int]
    NULL_ROWS_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    null_rows: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, values: _Iterable[float] | None = ..., null_rows: _Iterable[int] | None = ...) -> None: ...

class GpuInfo(_message.Message):
    __slots__ = ("index", "name", "uuid", "serial", "memory_total_bytes", "compute_capability", "pci_bus_id", "mig_parent_uuid", "fp16_tensor_cores", "bf16_tensor_cores", "int8_tensor_cores")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    SERIAL_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_CAPABILITY_FIELD_NUMBER: _ClassVar[int]
    PCI_BUS_ID_FIELD_NUMBER: _ClassVar[int]
    MIG_PARENT_UUID_FIELD_NUMBER: _ClassVar[int]
    FP16_TENSOR_CORES_FIELD_NUMBER: _ClassVar[int]
    BF16_TENSOR_CORES_FIELD_NUMBER: _ClassVar[int]
    INT8_TENSOR_CORES_FIELD_NUMBER: _ClassVar[int]
    index: int
    name: str
    uuid: str
    serial: str
    memory_total_bytes: int
    compute_capability: str
    pci_bus_id: str
    mig_parent_uuid: str
    fp16_tensor_cores: bool
    bf16_tensor_cores: bool
    int8_tensor_cores: bool
    def __init__(self, index: int | None = ..., name: str | None = ..., uuid: str | None = ..., serial: str | None = ..., memory_total_bytes: int | None = ..., compute_capability: str | None = ..., pci_bus_id: str | None = ..., mig_parent_uuid: str | None = ..., fp16_tensor_cores: bool | None = ..., bf16_tensor_cores: bool | None = ..., int8_tensor_cores: bool | None = ...) -> None: ...

class Inventory(_message.Message):
    __slots__ = ("cpu_model", "cpu_cores", "memory_total_bytes", "swap_total_bytes", "gpus", "os", "kernel", "python", "driver_version", "cuda_driver_version", "board_model", "l4t_release", "jetpack_version", "arch")
    CPU_MODEL_FIELD_NUMBER: _ClassVar[int]
    CPU_CORES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    SWAP_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    OS_FIELD_NUMBER: _ClassVar[int]
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    PYTHON_FIELD_NUMBER: _ClassVar[int]
    DRIVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    CUDA_DRIVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    BOARD_MODEL_FIELD_NUMBER: _ClassVar[int]
    L4T_RELEASE_FIELD_NUMBER: _ClassVar[int]
    JETPACK_VERSION_FIELD_NUMBER: _ClassVar[int]
    ARCH_FIELD_NUMBER: _ClassVar[int]
    cpu_model: str
    cpu_cores: int
    memory_total_bytes: int
    swap_total_bytes: int
    gpus: _containers.RepeatedCompositeFieldContainer[GpuInfo]
    os: str
    kernel: str
    python: str
    driver_version: str
    cuda_driver_version: str
    board_model: str
    l4t_release: str
    jetpack_version: str
    arch: str
    def __init__(self, cpu_model: str | None = ..., cpu_cores: int | None = ..., memory_total_bytes: int | None = ..., swap_total_bytes: int | None = ..., gpus: _Iterable[GpuInfo | _Mapping] | None = ..., os: str | None = ..., kernel: str | None = ..., python: str | None = ..., driver_version: str | None = ..., cuda_driver_version: str | None = ..., board_model: str | None = ..., l4t_release: str | None = ..., jetpack_version: str | None = ..., arch: str | None = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ("agent_id", "boot_id", "name", "hostname", "kind", "inventory", "agent_version", "labels", "capabilities", "sent_ns")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: str | None = ..., value: str | None = ...) -> None: ...
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    BOOT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    SENT_NS_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    boot_id: str
    name: str
    hostname: str
    kind: DeviceKind
    inventory: Inventory
    agent_version: str
    labels: _containers.ScalarMap[str, str]
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    sent_ns: int
    def __init__(self, agent_id: str | None = ..., boot_id: str | None = ..., name: str | None = ..., hostname: str | None = ..., kind: DeviceKind | str | None = ..., inventory: Inventory | _Mapping | None = ..., agent_version: str | None = ..., labels: _Mapping[str, str] | None = ..., capabilities: _Iterable[str] | None = ..., sent_ns: int | None = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("collector_version", "received_ns", "clock_skew_ns", "max_batch_bytes", "max_rows_per_batch", "capabilities")
    COLLECTOR_VERSION_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_NS_FIELD_NUMBER: _ClassVar[int]
    CLOCK_SKEW_NS_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_ROWS_PER_BATCH_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    collector_version: str
    received_ns: int
    clock_skew_ns: int
    max_batch_bytes: int
    max_rows_per_batch: int
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, collector_version: str | None = ..., received_ns: int | None = ..., clock_skew_ns: int | None = ..., max_batch_bytes: int | None = ..., max_rows_per_batch: int | None = ..., capabilities: _Iterable[str] | None = ...) -> None: ...

class HostSamples(_message.Message):
    __slots__ = ("ts_ns", "cpu_percent", "load1", "load5", "load15", "mem_total_bytes", "mem_used_bytes", "mem_available_bytes", "swap_total_bytes", "swap_used_bytes", "disk_total_bytes", "disk_used_bytes", "disk_read_bytes", "disk_write_bytes", "net_rx_bytes", "net_tx_bytes", "core_count", "cpu_core_percent", "cpu_core_freq_mhz", "process_count", "processes")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    LOAD1_FIELD_NUMBER: _ClassVar[int]
    LOAD5_FIELD_NUMBER: _ClassVar[int]
    LOAD15_FIELD_NUMBER: _ClassVar[int]
    MEM_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEM_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEM_AVAILABLE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SWAP_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    SWAP_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_READ_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_WRITE_BYTES_FIELD_NUMBER: _ClassVar[int]
    NET_RX_BYTES_FIELD_NUMBER: _ClassVar[int]
    NET_TX_BYTES_FIELD_NUMBER: _ClassVar[int]
    CORE_COUNT_FIELD_NUMBER: _ClassVar[int]
    CPU_CORE_PERCENT_FIELD_NUMBER: _ClassVar[int]
    CPU_CORE_FREQ_MHZ_FIELD_NUMBER: _ClassVar[int]
    PROCESS_COUNT_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    cpu_percent: Column
    load1: Column
    load5: Column
    load15: Column
    mem_total_bytes: Column
    mem_used_bytes: Column
    mem_available_bytes: Column
    swap_total_bytes: Column
    swap_used_bytes: Column
    disk_total_bytes: Column
    disk_used_bytes: Column
    disk_read_bytes: Column
    disk_write_bytes: Column
    net_rx_bytes: Column
    net_tx_bytes: Column
    core_count: _containers.RepeatedScalarFieldContainer[int]
    cpu_core_percent: _containers.RepeatedScalarFieldContainer[float]
    cpu_core_freq_mhz: _containers.RepeatedScalarFieldContainer[float]
    process_count: _containers.RepeatedScalarFieldContainer[int]
    processes: ProcessTable
    def __init__(self, ts_ns: _Iterable[int] | None = ..., cpu_percent: Column | _Mapping | None = ..., load1: Column | _Mapping | None = ..., load5: Column | _Mapping | None = ..., load15: Column | _Mapping | None = ..., mem_total_bytes: Column | _Mapping | None = ..., mem_used_bytes: Column | _Mapping | None = ..., mem_available_bytes: Column | _Mapping | None = ..., swap_total_bytes: Column | _Mapping | None = ..., swap_used_bytes: Column | _Mapping | None = ..., disk_total_bytes: Column | _Mapping | None = ..., disk_used_bytes: Column | _Mapping | None = ..., disk_read_bytes: Column | _Mapping | None = ..., disk_write_bytes: Column | _Mapping | None = ..., net_rx_bytes: Column | _Mapping | None = ..., net_tx_bytes: Column | _Mapping | None = ..., core_count: _Iterable[int] | None = ..., cpu_core_percent: _Iterable[float] | None = ..., cpu_core_freq_mhz: _Iterable[float] | None = ..., process_count: _Iterable[int] | None = ..., processes: ProcessTable | _Mapping | None = ...) -> None: ...

class ProcessTable(_message.Message):
    __slots__ = ("pid", "name", "cpu_percent", "rss_bytes", "gpu_memory_bytes", "container_id")
    PID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    GPU_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    pid: _containers.RepeatedScalarFieldContainer[int]
    name: _containers.RepeatedScalarFieldContainer[str]
    cpu_percent: Column
    rss_bytes: Column
    gpu_memory_bytes: Column
    container_id: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, pid: _Iterable[int] | None = ..., name: _Iterable[str] | None = ..., cpu_percent: Column | _Mapping | None = ..., rss_bytes: Column | _Mapping | None = ..., gpu_memory_bytes: Column | _Mapping | None = ..., container_id: _Iterable[str] | None = ...) -> None: ...

class GpuSamples(_message.Message):
    __slots__ = ("ts_ns", "gpu_index", "util_gpu_percent", "util_memory_percent", "util_encoder_percent", "util_decoder_percent", "memory_used_bytes", "memory_free_bytes", "memory_total_bytes", "bar1_used_bytes", "bar1_total_bytes", "temp_c", "memory_temp_c", "power_w", "power_limit_w", "energy_j", "sm_clock_mhz", "memory_clock_mhz", "graphics_clock_mhz", "sm_clock_max_mhz", "memory_clock_max_mhz", "pstate", "fan_percent", "pcie_gen", "pcie_width", "pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s", "throttle_reasons", "ecc_volatile_corrected", "ecc_volatile_uncorrected", "ecc_aggregate_corrected", "ecc_aggregate_uncorrected", "retired_pages", "remapped_rows", "process_count", "processes")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    GPU_INDEX_FIELD_NUMBER: _ClassVar[int]
    UTIL_GPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    UTIL_MEMORY_PERCENT_FIELD_NUMBER: _ClassVar[int]
    UTIL_ENCODER_PERCENT_FIELD_NUMBER: _ClassVar[int]
    UTIL_DECODER_PERCENT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    BAR1_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    BAR1_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    TEMP_C_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TEMP_C_FIELD_NUMBER: _ClassVar[int]
    POWER_W_FIELD_NUMBER: _ClassVar[int]
    POWER_LIMIT_W_FIELD_NUMBER: _ClassVar[int]
    ENERGY_J_FIELD_NUMBER: _ClassVar[int]
    SM_CLOCK_MHZ_FIELD_NUMBER: _ClassVar[int]
    MEMORY_CLOCK_MHZ_FIELD_NUMBER: _ClassVar[int]
    GRAPHICS_CLOCK_MHZ_FIELD_NUMBER: _ClassVar[int]
    SM_CLOCK_MAX_MHZ_FIELD_NUMBER: _ClassVar[int]
    MEMORY_CLOCK_MAX_MHZ_FIELD_NUMBER: _ClassVar[int]
    PSTATE_FIELD_NUMBER: _ClassVar[int]
    FAN_PERCENT_FIELD_NUMBER: _ClassVar[int]
    PCIE_GEN_FIELD_NUMBER: _ClassVar[int]
    PCIE_WIDTH_FIELD_NUMBER: _ClassVar[int]
    PCIE_TX_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    PCIE_RX_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_REASONS_FIELD_NUMBER: _ClassVar[int]
    ECC_VOLATILE_CORRECTED_FIELD_NUMBER: _ClassVar[int]
    ECC_VOLATILE_UNCORRECTED_FIELD_NUMBER: _ClassVar[int]
    ECC_AGGREGATE_CORRECTED_FIELD_NUMBER: _ClassVar[int]
    ECC_AGGREGATE_UNCORRECTED_FIELD_NUMBER: _ClassVar[int]
    RETIRED_PAGES_FIELD_NUMBER: _ClassVar[int]
    REMAPPED_ROWS_FIELD_NUMBER: _ClassVar[int]
    PROCESS_COUNT_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    gpu_index: _containers.RepeatedScalarFieldContainer[int]
    util_gpu_percent: Column
    util_memory_percent: Column
    util_encoder_percent: Column
    util_decoder_percent: Column
    memory_used_bytes: Column
    memory_free_bytes: Column
    memory_total_bytes: Column
    bar1_used_bytes: Column
    bar1_total_bytes: Column
    temp_c: Column
    memory_temp_c: Column
    power_w: Column
    power_limit_w: Column
    energy_j: Column
    sm_clock_mhz: Column
    memory_clock_mhz: Column
    graphics_clock_mhz: Column
    sm_clock_max_mhz: Column
    memory_clock_max_mhz: Column
    pstate: Column
    fan_percent: Column
    pcie_gen: Column
    pcie_width: Column
    pcie_tx_bytes_per_s: Column
    pcie_rx_bytes_per_s: Column
    throttle_reasons: Column
    ecc_volatile_corrected: Column
    ecc_volatile_uncorrected: Column
    ecc_aggregate_corrected: Column
    ecc_aggregate_uncorrected: Column
    retired_pages: Column
    remapped_rows: Column
    process_count: _containers.RepeatedScalarFieldContainer[int]
    processes: ProcessTable
    def __init__(self, ts_ns: _Iterable[int] | None = ..., gpu_index: _Iterable[int] | None = ..., util_gpu_percent: Column | _Mapping | None = ..., util_memory_percent: Column | _Mapping | None = ..., util_encoder_percent: Column | _Mapping | None = ..., util_decoder_percent: Column | _Mapping | None = ..., memory_used_bytes: Column | _Mapping | None = ..., memory_free_bytes: Column | _Mapping | None = ..., memory_total_bytes: Column | _Mapping | None = ..., bar1_used_bytes: Column | _Mapping | None = ..., bar1_total_bytes: Column | _Mapping | None = ..., temp_c: Column | _Mapping | None = ..., memory_temp_c: Column | _Mapping | None = ..., power_w: Column | _Mapping | None = ..., power_limit_w: Column | _Mapping | None = ..., energy_j: Column | _Mapping | None = ..., sm_clock_mhz: Column | _Mapping | None = ..., memory_clock_mhz: Column | _Mapping | None = ..., graphics_clock_mhz: Column | _Mapping | None = ..., sm_clock_max_mhz: Column | _Mapping | None = ..., memory_clock_max_mhz: Column | _Mapping | None = ..., pstate: Column | _Mapping | None = ..., fan_percent: Column | _Mapping | None = ..., pcie_gen: Column | _Mapping | None = ..., pcie_width: Column | _Mapping | None = ..., pcie_tx_bytes_per_s: Column | _Mapping | None = ..., pcie_rx_bytes_per_s: Column | _Mapping | None = ..., throttle_reasons: Column | _Mapping | None = ..., ecc_volatile_corrected: Column | _Mapping | None = ..., ecc_volatile_uncorrected: Column | _Mapping | None = ..., ecc_aggregate_corrected: Column | _Mapping | None = ..., ecc_aggregate_uncorrected: Column | _Mapping | None = ..., retired_pages: Column | _Mapping | None = ..., remapped_rows: Column | _Mapping | None = ..., process_count: _Iterable[int] | None = ..., processes: ProcessTable | _Mapping | None = ...) -> None: ...

class LatencyHistogram(_message.Message):
    __slots__ = ("name", "labels", "start_ns", "end_ns", "count", "sum_ns", "errors", "bucket_index", "bucket_count", "zero_count")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: str | None = ..., value: str | None = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    SUM_NS_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    BUCKET_INDEX_FIELD_NUMBER: _ClassVar[int]
    BUCKET_COUNT_FIELD_NUMBER: _ClassVar[int]
    ZERO_COUNT_FIELD_NUMBER: _ClassVar[int]
    name: str
    labels: _containers.ScalarMap[str, str]
    start_ns: int
    end_ns: int
    count: int
    sum_ns: int
    errors: int
    bucket_index: _containers.RepeatedScalarFieldContainer[int]
    bucket_count: _containers.RepeatedScalarFieldContainer[int]
    zero_count: int
    def __init__(self, name: str | None = ..., labels: _Mapping[str, str] | None = ..., start_ns: int | None = ..., end_ns: int | None = ..., count: int | None = ..., sum_ns: int | None = ..., errors: int | None = ..., bucket_index: _Iterable[int] | None = ..., bucket_count: _Iterable[int] | None = ..., zero_count: int | None = ...) -> None: ...

class LogEvent(_message.Message):
    __slots__ = ("ts_ns", "source", "level", "message", "parsed_ts_ns")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARSED_TS_NS_FIELD_NUMBER: _ClassVar[int]
    ts_ns: int
    source: str
    level: Level
    message: str
    parsed_ts_ns: int
    def __init__(self, ts_ns: int | None = ..., source: str | None = ..., level: Level | str | None = ..., message: str | None = ..., parsed_ts_ns: int | None = ...) -> None: ...

class FactValue(_message.Message):
    __slots__ = ("text", "integer", "real", "flag")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    INTEGER_FIELD_NUMBER: _ClassVar[int]
    REAL_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    text: str
    integer: int
    real: float
    flag: bool
    def __init__(self, text: str | None = ..., integer: int | None = ..., real: float | None = ..., flag: bool | None = ...) -> None: ...

class Incident(_message.Message):
    __slots__ = ("ts_ns", "kind", "severity", "title", "facts", "source", "excerpt")
    class FactsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: FactValue
        def __init__(self, key: str | None = ..., value: FactValue | _Mapping | None = ...) -> None: ...
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    FACTS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    EXCERPT_FIELD_NUMBER: _ClassVar[int]
    ts_ns: int
    kind: str
    severity: Level
    title: str
    facts: _containers.MessageMap[str, FactValue]
    source: str
    excerpt: str
    def __init__(self, ts_ns: int | None = ..., kind: str | None = ..., severity: Level | str | None = ..., title: str | None = ..., facts: _Mapping[str, FactValue] | None = ..., source: str | None = ..., excerpt: str | None = ...) -> None: ...

class MetricPoint(_message.Message):
    __slots__ = ("name", "ts_ns", "value", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: str | None = ..., value: str | None = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    name: str
    ts_ns: int
    value: float
    labels: _containers.ScalarMap[str, str]
    def __init__(self, name: str | None = ..., ts_ns: int | None = ..., value: float | None = ..., labels: _Mapping[str, str] | None = ...) -> None: ...

class InventoryRecord(_message.Message):
    __slots__ = ("kind", "name", "ts_ns", "facts")
    class FactsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: FactValue
        def __init__(self, key: str | None = ..., value: FactValue | _Mapping | None = ...) -> None: ...
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    FACTS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    ts_ns: int
    facts: _containers.MessageMap[str, FactValue]
    def __init__(self, kind: str | None = ..., name: str | None = ..., ts_ns: int | None = ..., facts: _Mapping[str, FactValue] | None = ...) -> None: ...

class AgentCounters(_message.Message):
    __slots__ = ("spool_batches", "spool_bytes", "dropped_batches", "dropped_samples", "dropped_logs", "dropped_incidents", "reconnects", "rejected_batches", "last_rejection", "sampler_errors", "rss_bytes", "cpu_seconds")
    SPOOL_BATCHES_FIELD_NUMBER: _ClassVar[int]
    SPOOL_BYTES_FIELD_NUMBER: _ClassVar[int]
    DROPPED_BATCHES_FIELD_NUMBER: _ClassVar[int]
    DROPPED_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    DROPPED_LOGS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_INCIDENTS_FIELD_NUMBER: _ClassVar[int]
    RECONNECTS_FIELD_NUMBER: _ClassVar[int]
    REJECTED_BATCHES_FIELD_NUMBER: _ClassVar[int]
    LAST_REJECTION_FIELD_NUMBER: _ClassVar[int]
    SAMPLER_ERRORS_FIELD_NUMBER: _ClassVar[int]
    RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    spool_batches: int
    spool_bytes: int
    dropped_batches: int
    dropped_samples: int
    dropped_logs: int
    dropped_incidents: int
    reconnects: int
    rejected_batches: int
    last_rejection: str
    sampler_errors: int
    rss_bytes: float
    cpu_seconds: float
    def __init__(self, spool_batches: int | None = ..., spool_bytes: int | None = ..., dropped_batches: int | None = ..., dropped_samples: int | None = ..., dropped_logs: int | None = ..., dropped_incidents: int | None = ..., reconnects: int | None = ..., rejected_batches: int | None = ..., last_rejection: str | None = ..., sampler_errors: int | None = ..., rss_bytes: float | None = ..., cpu_seconds: float | None = ...) -> None: ...

class Batch(_message.Message):
    __slots__ = ("agent_id", "boot_id", "seq", "created_ns", "sent_ns", "host", "gpu", "latency", "logs", "incidents", "counters", "metrics", "inventory_records")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    BOOT_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    CREATED_NS_FIELD_NUMBER: _ClassVar[int]
    SENT_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    LATENCY_FIELD_NUMBER: _ClassVar[int]
    LOGS_FIELD_NUMBER: _ClassVar[int]
    INCIDENTS_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_RECORDS_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    boot_id: str
    seq: int
    created_ns: int
    sent_ns: int
    host: HostSamples
    gpu: GpuSamples
    latency: _containers.RepeatedCompositeFieldContainer[LatencyHistogram]
    logs: _containers.RepeatedCompositeFieldContainer[LogEvent]
    incidents: _containers.RepeatedCompositeFieldContainer[Incident]
    counters: AgentCounters
    metrics: _containers.RepeatedCompositeFieldContainer[MetricPoint]
    inventory_records: _containers.RepeatedCompositeFieldContainer[InventoryRecord]
    def __init__(self, agent_id: str | None = ..., boot_id: str | None = ..., seq: int | None = ..., created_ns: int | None = ..., sent_ns: int | None = ..., host: HostSamples | _Mapping | None = ..., gpu: GpuSamples | _Mapping | None = ..., latency: _Iterable[LatencyHistogram | _Mapping] | None = ..., logs: _Iterable[LogEvent | _Mapping] | None = ..., incidents: _Iterable[Incident | _Mapping] | None = ..., counters: AgentCounters | _Mapping | None = ..., metrics: _Iterable[MetricPoint | _Mapping] | None = ..., inventory_records: _Iterable[InventoryRecord | _Mapping] | None = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("seq", "status", "code", "reason", "rows")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATUS_UNSPECIFIED: _ClassVar[Ack.Status]
        STATUS_STORED: _ClassVar[Ack.Status]
        STATUS_DUPLICATE: _ClassVar[Ack.Status]
        STATUS_REJECTED: _ClassVar[Ack.Status]
    STATUS_UNSPECIFIED: Ack.Status
    STATUS_STORED: Ack.Status
    STATUS_DUPLICATE: Ack.Status
    STATUS_REJECTED: Ack.Status
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    seq: int
    status: Ack.Status
    code: int
    reason: str
    rows: int
    def __init__(self, seq: int | None = ..., status: Ack.Status | str | None = ..., code: int | None = ..., reason: str | None = ..., rows: int | None = ...) -> None: ...

class ProcessRef(_message.Message):
    __slots__ = ("pid", "name", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: str | None = ..., value: str | None = ...) -> None: ...
    PID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    pid: int
    name: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, pid: int | None = ..., name: str | None = ..., labels: _Mapping[str, str] | None = ...) -> None: ...

class SdkReport(_message.Message):
    __slots__ = ("process", "latency", "metrics", "logs", "incidents", "inventory_records", "dropped")
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    LOGS_FIELD_NUMBER: _ClassVar[int]
    INCIDENTS_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_RECORDS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    process: ProcessRef
    latency: _containers.RepeatedCompositeFieldContainer[LatencyHistogram]
    metrics: _containers.RepeatedCompositeFieldContainer[MetricPoint]
    logs: _containers.RepeatedCompositeFieldContainer[LogEvent]
    incidents: _containers.RepeatedCompositeFieldContainer[Incident]
    inventory_records: _containers.RepeatedCompositeFieldContainer[InventoryRecord]
    dropped: int
    def __init__(self, process: ProcessRef | _Mapping | None = ..., latency: _Iterable[LatencyHistogram | _Mapping] | None = ..., metrics: _Iterable[MetricPoint | _Mapping] | None = ..., logs: _Iterable[LogEvent | _Mapping] | None = ..., incidents: _Iterable[Incident | _Mapping] | None = ..., inventory_records: _Iterable[InventoryRecord | _Mapping] | None = ..., dropped: int | None = ...) -> None: ...

class SdkAck(_message.Message):
    __slots__ = ("accepted",)
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    accepted: int
    def __init__(self, accepted: int | None = ...) -> None: ...
