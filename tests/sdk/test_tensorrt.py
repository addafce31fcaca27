"""The TensorRT adapter against a stand-in for the documented Python API (TensorRT is not installable here).

The stand-in follows TensorRT's Python docs: ``trt.ILogger`` is subclassed, its ``__init__`` is
called explicitly, TensorRT calls ``log(self, severity, msg)`` with an ``ILogger.Severity`` member
(INTERNAL_ERROR=0 .. VERBOSE=4); engines expose ``num_io_tensors``/``get_tensor_*`` (8.5+) or
``num_bindings``/``get_binding_*`` (7.x/8.x); builder configs ``get_flag``/``get_memory_pool_limit``.
"""

from __future__ import annotations

import enum
import types

import pytest

from fleetscope.agent import sdk
from fleetscope.agent.sdk import _facts, _tensorrt

from .conftest import facts


class _Severity(enum.IntEnum):  # pybind11 enums have .name and int(); so does this
    INTERNAL_ERROR = 0
    ERROR = 1
    WARNING = 2
    INFO = 3
    VERBOSE = 4


class _ILogger:
    Severity = _Severity
    init_calls = 0

    def __init__(self) -> None:
        _ILogger.init_calls += 1

    def log(self, severity: _Severity, msg: str) -> None:
        raise NotImplementedError


class _BuilderFlag(enum.Enum):
    FP16 = 0
    INT8 = 1
    BF16 = 2
    TF32 = 3


class _MemoryPoolType(enum.Enum):
    WORKSPACE = 0
    TACTIC_SHARED_MEMORY = 1


class _TensorIOMode(enum.Enum):
    NONE = 0
    INPUT = 1
    OUTPUT = 2


class _DataType(enum.Enum):
    FLOAT = 0
    HALF = 1


trt = types.SimpleNamespace(
    __version__="10.3.0",
    ILogger=_ILogger,
    BuilderFlag=_BuilderFlag,
    MemoryPoolType=_MemoryPoolType,
)


class _Engine:
    name = "resnet"
    num_layers = 120
    num_optimization_profiles = 1
    device_memory_size_v2 = 64 << 20

    _io = {
        "images": (_TensorIOMode.INPUT, (-1, 3, 224, 224), _DataType.HALF),
        "logits": (_TensorIOMode.OUTPUT, (-1, 1000), _DataType.FLOAT),
    }
    num_io_tensors = 2

    def get_tensor_name(self, i: int) -> str:
        return list(self._io)[i]

    def get_tensor_mode(self, name: str) -> _TensorIOMode:
        return self._io[name][0]

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        return self._io[name][1]

    def get_tensor_dtype(self, name: str) -> _DataType:
        return self._io[name][2]

    def get_tensor_profile_shape(self, name: str, profile: int) -> tuple[tuple[int, ...], ...]:
        return (1, 3, 224, 224), (8, 3, 224, 224), (32, 3, 224, 224)


class _OldEngine:  # TensorRT 7/8 on JetPack 4/5: bindings by index
    num_bindings = 2
    num_optimization_profiles = 1
    device_memory_size = 1 << 20

    def binding_is_input(self, i: int) -> bool:
        return i == 0

    def get_binding_name(self, i: int) -> str:
        return ["input", "output"][i]

    def get_binding_shape(self, i: int) -> tuple[int, ...]:
        return [(1, 3, 300, 300), (1, 100, 7)][i]

    def get_binding_dtype(self, i: int) -> _DataType:
        return _DataType.FLOAT


class _Config:
    def get_flag(self, flag: _BuilderFlag) -> bool:
        return flag in (_BuilderFlag.FP16, _BuilderFlag.TF32)

    def get_memory_pool_limit(self, pool: _MemoryPoolType) -> int:
        return {_MemoryPoolType.WORKSPACE: 1 << 30, _MemoryPoolType.TACTIC_SHARED_MEMORY: 48 << 10}[pool]


@pytest.mark.server
def test_the_logger_subclasses_ilogger_and_forwards_each_severity(agent) -> None:
    _, sink = agent
    cls = sdk.trt_logger_class(trt)
    assert issubclass(cls, _ILogger) and cls is sdk.trt_logger_class(trt)  # built once per base
    before = _ILogger.init_calls
    logger = sdk.create_trt_logger(_Severity.VERBOSE, trt=trt, echo=False)
    assert isinstance(logger, _ILogger) and _ILogger.init_calls == before + 1
    for severity in _Severity:
        logger.log(severity, f"message at {severity.name}")
    sdk.flush(5.0)
    assert sink.wait_for(lambda s: len(s.logs()) == 5)
    levels = {e.message: e.level for e in sink.logs()}
    assert levels == {
        "message at INTERNAL_ERROR": _facts.LEVELS["critical"],
        "message at ERROR": _facts.LEVELS["error"],
        "message at WARNING": _facts.LEVELS["warning"],
        "message at INFO": _facts.LEVELS["info"],
        "message at VERBOSE": _facts.LEVELS["debug"],
    }
    assert {e.source for e in sink.logs()} == {"tensorrt"}
    assert {i.title.split(":")[0] for i in sink.incidents("tensorrt_error")} == {
        "TensorRT internal error",
        "TensorRT error",
    }


@pytest.mark.server
def test_the_default_minimum_is_warning_and_errors_become_one_incident_each(agent, capsys) -> None:
    _, sink = agent
    logger = sdk.create_trt_logger(trt=trt)
    logger.log(_Severity.INFO, "Loaded engine size: 12 MiB")
    logger.log(_Severity.VERBOSE, "tactic 0x1234")
    for _ in range(3):
        logger.log(
            _Severity.ERROR,
            "[optimizer] Requested amount of GPU memory (4294967296 bytes) could not be allocated",
        )
    logger.log(_Severity.WARNING, "TensorRT was linked against cuDNN 8.6.0 but loaded cuDNN 8.2.1")
    assert "[TRT] [E] [optimizer]" in capsys.readouterr().err  # echoed like trt.Logger does
    assert logger.counts["ERROR"] == 3 and logger.counts["INFO"] == 0
    sdk.flush(5.0)
    assert sink.wait_for(lambda s: len(s.logs()) == 4)
    assert len(sink.incidents("tensorrt_error")) == 1
    assert facts(sink.incidents("tensorrt_error")[0])["trt_severity"] == "ERROR"


def test_log_never_raises_into_tensorrt() -> None:
    logger = sdk.create_trt_logger(trt=trt, echo=False)
    logger.log(object(), None)  # type: ignore[arg-type]
    logger.log(17, "severity out of range")
    logger.log(_Severity.ERROR, b"bytes, not str")  # type: ignore[arg-type]


def test_without_tensorrt_the_plain_base_has_the_same_shape() -> None:
    cls = sdk.trt_logger_class(types.SimpleNamespace())  # a "tensorrt" without ILogger
    assert issubclass(cls, _tensorrt.PlainILogger)
    logger = cls(echo=False)
    assert logger.min_severity == cls.Severity.WARNING
    logger.log(cls.Severity.ERROR, "works without TensorRT")
    assert sdk.FleetscopeTrtLogger is sdk.trt_logger_class()  # lazy module attribute


class _Context:
    def __init__(self, result: object = True) -> None:
        self.calls: list[tuple[str, object]] = []
        self.result = result

    def execute_async_v3(self, stream: int) -> object:
        self.calls.append(("v3", stream))
        return self.result

    def execute_v2(self, bindings: list[int]) -> object:
        self.calls.append(("v2", bindings))
        return self.result

    def execute_async_v2(self, bindings: list[int], stream: int) -> object:
        self.calls.append(("async_v2", (bindings, stream)))
        return self.result


class _Stream:
    cuda_stream = 0xBEEF

    def __init__(self) -> None:
        self.synced = 0

    def synchronize(self) -> None:
        self.synced += 1


@pytest.mark.server
def test_trt_timed_runs_the_right_entry_point_and_feeds_latency(agent) -> None:
    _, sink = agent
    ctx, stream = _Context(), _Stream()
    assert sdk.trt_timed(ctx, stream, name="test.trt", engine="resnet") is True
    assert sdk.trt_timed(ctx, bindings=[1, 2], name="test.trt", engine="resnet") is True
    assert sdk.trt_timed(ctx, 42, bindings=[3], name="test.trt", engine="resnet") is True
    assert ctx.calls == [("v3", 0xBEEF), ("v2", [1, 2]), ("async_v2", ([3], 42))]
    assert stream.synced == 1
    assert sdk.trt_timed(_Context(result=False), name="test.trt", engine="resnet") is False

    class Broken(_Context):
        def execute_async_v3(self, stream: int) -> object:
            raise RuntimeError("engine lost")

    with pytest.raises(RuntimeError, match="engine lost"):
        sdk.trt_timed(Broken(), name="test.trt", engine="resnet")
    sdk.flush(5.0)
    assert sink.wait_for(lambda s: s.merged("test.trt", engine="resnet").count == 5)
    assert sink.merged("test.trt", engine="resnet").errors == 2


@pytest.mark.server
def test_engine_metadata_is_sent_as_a_tensorrt_engine_record(agent) -> None:
    _, sink = agent
    info = sdk.describe_engine(_Engine(), config=_Config(), trt=trt)
    assert info.trt_version == "10.3.0" and info.name == "resnet" and info.dynamic
    assert [t.name for t in info.inputs] == ["images"] and info.inputs[0].dtype == "half"
    assert info.inputs[0].profile_shapes == (((1, 3, 224, 224), (8, 3, 224, 224), (32, 3, 224, 224)),)
    assert dict(info.precision_flags) == {"FP16": True, "INT8": False, "BF16": False, "TF32": True}
    assert info.memory_pool_limits["WORKSPACE"] == 1 << 30
    sdk.flush(5.0)
    assert sink.wait_for(lambda s: bool(s.inventory("tensorrt_engine")))
    record = sink.inventory("tensorrt_engine")[0]
    f = facts(record)
    assert record.name == "resnet"
    assert (
        f["trt_version"] == "10.3.0" and f["dynamic_shapes"] is True and f["device_memory_bytes"] == 64 << 20
    )
    assert f["input.images.shape"] == "[-1, 3, 224, 224]" and f["input.images.dynamic"] is True
    assert f["input.images.profile0.max"] == "[32, 3, 224, 224]"
    assert f["output.logits.dtype"] == "float"
    assert f["flag.fp16"] is True and f["flag.int8"] is False
    assert (
        f["memory_pool.workspace_bytes"] == 1 << 30
        and f["memory_pool.tactic_shared_memory_bytes"] == 48 << 10
    )


def test_old_binding_api_engines_are_described_too() -> None:
    info = sdk.describe_engine(_OldEngine(), name="ssd", trt=trt, send=False)
    assert [(t.name, t.is_input, t.shape) for t in info.tensors] == [
        ("input", True, (1, 3, 300, 300)),
        ("output", False, (1, 100, 7)),
    ]
    assert not info.dynamic and info.device_memory_bytes == 1 << 20 and info.precision_flags == {}
