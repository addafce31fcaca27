from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

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
    def __init__(self, values: _Optional[_Iterable[float]] = ..., null_rows: _Optional[_Iterable[int]] = ...) -> None: ...

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
    def __init__(self, index: _Optional[int] = ..., name: _Optional[str] = ..., uuid: _Optional[str] = ..., serial: _Optional[str] = ..., memory_total_bytes: _Optional[int] = ..., compute_capability: _Optional[str] = ..., pci_bus_id: _Optional[str] = ..., mig_parent_uuid: _Optional[str] = ..., fp16_tensor_cores: _Optional[bool] = ..., bf16_tensor_cores: _Optional[bool] = ..., int8_tensor_cores: _Optional[bool] = ...) -> None: ...

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
    def __init__(self, cpu_model: _Optional[str] = ..., cpu_cores: _Optional[int] = ..., memory_total_bytes: _Optional[int] = ..., swap_total_bytes: _Optional[int] = ..., gpus: _Optional[_Iterable[_Union[GpuInfo, _Mapping]]] = ..., os: _Optional[str] = ..., kernel: _Optional[str] = ..., python: _Optional[str] = ..., driver_version: _Optional[str] = ..., cuda_driver_version: _Optional[str] = ..., board_model: _Optional[str] = ..., l4t_release: _Optional[str] = ..., jetpack_version: _Optional[str] = ..., arch: _Optional[str] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ("agent_id", "boot_id", "name", "hostname", "kind", "inventory", "agent_version", "labels", "capabilities", "sent_ns", "batch_interval_s")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
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
    BATCH_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
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
    batch_interval_s: float
    def __init__(self, agent_id: _Optional[str] = ..., boot_id: _Optional[str] = ..., name: _Optional[str] = ..., hostname: _Optional[str] = ..., kind: _Optional[_Union[DeviceKind, str]] = ..., inventory: _Optional[_Union[Inventory, _Mapping]] = ..., agent_version: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., capabilities: _Optional[_Iterable[str]] = ..., sent_ns: _Optional[int] = ..., batch_interval_s: _Optional[float] = ...) -> None: ...

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
    def __init__(self, collector_version: _Optional[str] = ..., received_ns: _Optional[int] = ..., clock_skew_ns: _Optional[int] = ..., max_batch_bytes: _Optional[int] = ..., max_rows_per_batch: _Optional[int] = ..., capabilities: _Optional[_Iterable[str]] = ...) -> None: ...

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
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., cpu_percent: _Optional[_Union[Column, _Mapping]] = ..., load1: _Optional[_Union[Column, _Mapping]] = ..., load5: _Optional[_Union[Column, _Mapping]] = ..., load15: _Optional[_Union[Column, _Mapping]] = ..., mem_total_bytes: _Optional[_Union[Column, _Mapping]] = ..., mem_used_bytes: _Optional[_Union[Column, _Mapping]] = ..., mem_available_bytes: _Optional[_Union[Column, _Mapping]] = ..., swap_total_bytes: _Optional[_Union[Column, _Mapping]] = ..., swap_used_bytes: _Optional[_Union[Column, _Mapping]] = ..., disk_total_bytes: _Optional[_Union[Column, _Mapping]] = ..., disk_used_bytes: _Optional[_Union[Column, _Mapping]] = ..., disk_read_bytes: _Optional[_Union[Column, _Mapping]] = ..., disk_write_bytes: _Optional[_Union[Column, _Mapping]] = ..., net_rx_bytes: _Optional[_Union[Column, _Mapping]] = ..., net_tx_bytes: _Optional[_Union[Column, _Mapping]] = ..., core_count: _Optional[_Iterable[int]] = ..., cpu_core_percent: _Optional[_Iterable[float]] = ..., cpu_core_freq_mhz: _Optional[_Iterable[float]] = ..., process_count: _Optional[_Iterable[int]] = ..., processes: _Optional[_Union[ProcessTable, _Mapping]] = ...) -> None: ...

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
    def __init__(self, pid: _Optional[_Iterable[int]] = ..., name: _Optional[_Iterable[str]] = ..., cpu_percent: _Optional[_Union[Column, _Mapping]] = ..., rss_bytes: _Optional[_Union[Column, _Mapping]] = ..., gpu_memory_bytes: _Optional[_Union[Column, _Mapping]] = ..., container_id: _Optional[_Iterable[str]] = ...) -> None: ...

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
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., gpu_index: _Optional[_Iterable[int]] = ..., util_gpu_percent: _Optional[_Union[Column, _Mapping]] = ..., util_memory_percent: _Optional[_Union[Column, _Mapping]] = ..., util_encoder_percent: _Optional[_Union[Column, _Mapping]] = ..., util_decoder_percent: _Optional[_Union[Column, _Mapping]] = ..., memory_used_bytes: _Optional[_Union[Column, _Mapping]] = ..., memory_free_bytes: _Optional[_Union[Column, _Mapping]] = ..., memory_total_bytes: _Optional[_Union[Column, _Mapping]] = ..., bar1_used_bytes: _Optional[_Union[Column, _Mapping]] = ..., bar1_total_bytes: _Optional[_Union[Column, _Mapping]] = ..., temp_c: _Optional[_Union[Column, _Mapping]] = ..., memory_temp_c: _Optional[_Union[Column, _Mapping]] = ..., power_w: _Optional[_Union[Column, _Mapping]] = ..., power_limit_w: _Optional[_Union[Column, _Mapping]] = ..., energy_j: _Optional[_Union[Column, _Mapping]] = ..., sm_clock_mhz: _Optional[_Union[Column, _Mapping]] = ..., memory_clock_mhz: _Optional[_Union[Column, _Mapping]] = ..., graphics_clock_mhz: _Optional[_Union[Column, _Mapping]] = ..., sm_clock_max_mhz: _Optional[_Union[Column, _Mapping]] = ..., memory_clock_max_mhz: _Optional[_Union[Column, _Mapping]] = ..., pstate: _Optional[_Union[Column, _Mapping]] = ..., fan_percent: _Optional[_Union[Column, _Mapping]] = ..., pcie_gen: _Optional[_Union[Column, _Mapping]] = ..., pcie_width: _Optional[_Union[Column, _Mapping]] = ..., pcie_tx_bytes_per_s: _Optional[_Union[Column, _Mapping]] = ..., pcie_rx_bytes_per_s: _Optional[_Union[Column, _Mapping]] = ..., throttle_reasons: _Optional[_Union[Column, _Mapping]] = ..., ecc_volatile_corrected: _Optional[_Union[Column, _Mapping]] = ..., ecc_volatile_uncorrected: _Optional[_Union[Column, _Mapping]] = ..., ecc_aggregate_corrected: _Optional[_Union[Column, _Mapping]] = ..., ecc_aggregate_uncorrected: _Optional[_Union[Column, _Mapping]] = ..., retired_pages: _Optional[_Union[Column, _Mapping]] = ..., remapped_rows: _Optional[_Union[Column, _Mapping]] = ..., process_count: _Optional[_Iterable[int]] = ..., processes: _Optional[_Union[ProcessTable, _Mapping]] = ...) -> None: ...

class LatencyHistogram(_message.Message):
    __slots__ = ("name", "labels", "start_ns", "end_ns", "count", "sum_ns", "errors", "bucket_index", "bucket_count", "zero_count", "scheme")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
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
    SCHEME_FIELD_NUMBER: _ClassVar[int]
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
    scheme: int
    def __init__(self, name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., start_ns: _Optional[int] = ..., end_ns: _Optional[int] = ..., count: _Optional[int] = ..., sum_ns: _Optional[int] = ..., errors: _Optional[int] = ..., bucket_index: _Optional[_Iterable[int]] = ..., bucket_count: _Optional[_Iterable[int]] = ..., zero_count: _Optional[int] = ..., scheme: _Optional[int] = ...) -> None: ...

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
    def __init__(self, ts_ns: _Optional[int] = ..., source: _Optional[str] = ..., level: _Optional[_Union[Level, str]] = ..., message: _Optional[str] = ..., parsed_ts_ns: _Optional[int] = ...) -> None: ...

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
    def __init__(self, text: _Optional[str] = ..., integer: _Optional[int] = ..., real: _Optional[float] = ..., flag: _Optional[bool] = ...) -> None: ...

class Incident(_message.Message):
    __slots__ = ("ts_ns", "kind", "severity", "title", "facts", "source", "excerpt")
    class FactsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: FactValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[FactValue, _Mapping]] = ...) -> None: ...
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
    def __init__(self, ts_ns: _Optional[int] = ..., kind: _Optional[str] = ..., severity: _Optional[_Union[Level, str]] = ..., title: _Optional[str] = ..., facts: _Optional[_Mapping[str, FactValue]] = ..., source: _Optional[str] = ..., excerpt: _Optional[str] = ...) -> None: ...

class MetricPoint(_message.Message):
    __slots__ = ("name", "ts_ns", "value", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    name: str
    ts_ns: int
    value: float
    labels: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., ts_ns: _Optional[int] = ..., value: _Optional[float] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class InventoryRecord(_message.Message):
    __slots__ = ("kind", "name", "ts_ns", "facts")
    class FactsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: FactValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[FactValue, _Mapping]] = ...) -> None: ...
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    FACTS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    ts_ns: int
    facts: _containers.MessageMap[str, FactValue]
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., ts_ns: _Optional[int] = ..., facts: _Optional[_Mapping[str, FactValue]] = ...) -> None: ...

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
    def __init__(self, spool_batches: _Optional[int] = ..., spool_bytes: _Optional[int] = ..., dropped_batches: _Optional[int] = ..., dropped_samples: _Optional[int] = ..., dropped_logs: _Optional[int] = ..., dropped_incidents: _Optional[int] = ..., reconnects: _Optional[int] = ..., rejected_batches: _Optional[int] = ..., last_rejection: _Optional[str] = ..., sampler_errors: _Optional[int] = ..., rss_bytes: _Optional[float] = ..., cpu_seconds: _Optional[float] = ...) -> None: ...

class Batch(_message.Message):
    __slots__ = ("agent_id", "boot_id", "seq", "created_ns", "sent_ns", "host", "gpu", "latency", "logs", "incidents", "counters", "metrics", "inventory_records", "created_mono_ns", "sent_mono_ns", "sent_boot_id", "created_boot_id", "final", "compact")
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
    CREATED_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    SENT_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    SENT_BOOT_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_BOOT_ID_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    COMPACT_FIELD_NUMBER: _ClassVar[int]
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
    created_mono_ns: int
    sent_mono_ns: int
    sent_boot_id: str
    created_boot_id: str
    final: bool
    compact: bytes
    def __init__(self, agent_id: _Optional[str] = ..., boot_id: _Optional[str] = ..., seq: _Optional[int] = ..., created_ns: _Optional[int] = ..., sent_ns: _Optional[int] = ..., host: _Optional[_Union[HostSamples, _Mapping]] = ..., gpu: _Optional[_Union[GpuSamples, _Mapping]] = ..., latency: _Optional[_Iterable[_Union[LatencyHistogram, _Mapping]]] = ..., logs: _Optional[_Iterable[_Union[LogEvent, _Mapping]]] = ..., incidents: _Optional[_Iterable[_Union[Incident, _Mapping]]] = ..., counters: _Optional[_Union[AgentCounters, _Mapping]] = ..., metrics: _Optional[_Iterable[_Union[MetricPoint, _Mapping]]] = ..., inventory_records: _Optional[_Iterable[_Union[InventoryRecord, _Mapping]]] = ..., created_mono_ns: _Optional[int] = ..., sent_mono_ns: _Optional[int] = ..., sent_boot_id: _Optional[str] = ..., created_boot_id: _Optional[str] = ..., final: _Optional[bool] = ..., compact: _Optional[bytes] = ...) -> None: ...

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
    def __init__(self, seq: _Optional[int] = ..., status: _Optional[_Union[Ack.Status, str]] = ..., code: _Optional[int] = ..., reason: _Optional[str] = ..., rows: _Optional[int] = ...) -> None: ...

class ProcessRef(_message.Message):
    __slots__ = ("pid", "name", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    pid: int
    name: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, pid: _Optional[int] = ..., name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

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
    def __init__(self, process: _Optional[_Union[ProcessRef, _Mapping]] = ..., latency: _Optional[_Iterable[_Union[LatencyHistogram, _Mapping]]] = ..., metrics: _Optional[_Iterable[_Union[MetricPoint, _Mapping]]] = ..., logs: _Optional[_Iterable[_Union[LogEvent, _Mapping]]] = ..., incidents: _Optional[_Iterable[_Union[Incident, _Mapping]]] = ..., inventory_records: _Optional[_Iterable[_Union[InventoryRecord, _Mapping]]] = ..., dropped: _Optional[int] = ...) -> None: ...

class SdkAck(_message.Message):
    __slots__ = ("accepted",)
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    accepted: int
    def __init__(self, accepted: _Optional[int] = ...) -> None: ...
