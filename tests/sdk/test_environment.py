"""check_environment and `fleetscope doctor`, with GPU presence stated since there is no GPU here."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from fleetscope.agent import sdk
from fleetscope.agent.sdk import precision_support

from .conftest import facts


class StandInSession:
    """Exposes what check_environment reads from an onnxruntime.InferenceSession."""

    def __init__(self, actual: list[str], requested: list[object] | None = None) -> None:
        self._actual = actual
        if requested is not None:
            self._providers = requested  # what ORT's Python session keeps from providers=

    def get_providers(self) -> list[str]:
        return list(self._actual)


def _loader(workers: int = 0, pin: bool = False) -> DataLoader:
    return DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=4, num_workers=workers, pin_memory=pin)


@pytest.mark.server
def test_a_model_on_the_cpu_is_flagged_when_a_gpu_is_present(agent) -> None:
    _, sink = agent
    model = torch.nn.Linear(4, 2)
    report = sdk.check_environment(
        models={"net": model}, dataloaders={"train": _loader()}, cuda_available=True
    )
    assert report.cuda_available
    assert report.models[0].devices == ("cpu",) and report.models[0].parameters == 10
    assert report.models[0].dtypes == ("float32",)
    kinds = report.finding_kinds()
    assert (
        "model_on_cpu" in kinds and "dataloader_no_workers" in kinds and "dataloader_no_pin_memory" in kinds
    )
    assert kinds[0] == "model_on_cpu"  # worst first
    assert not report.ok
    sdk.flush(5.0)
    assert sink.wait_for(lambda s: bool(s.incidents("model_on_cpu")) and bool(s.inventory("environment")))
    incident = sink.incidents("model_on_cpu")[0]
    assert facts(incident)["model"] == "net" and facts(incident)["parameters"] == 10
    assert sink.incidents("dataloader_no_workers")  # a warning finding goes out as an incident too
    assert not sink.incidents("dataloader_no_pin_memory")  # info stays in the inventory record
    env = facts(sink.inventory("environment")[0])
    assert env["torch_version"] == torch.__version__ and env["cuda_available"] is True
    assert env["model.net.devices"] == "cpu" and env["dataloader.train.num_workers"] == 0
    assert env["finding.0.kind"] == "model_on_cpu" and env["ok"] is False


def test_without_a_gpu_a_cpu_model_and_zero_workers_are_fine() -> None:
    report = sdk.check_environment(
        models=[torch.nn.Linear(2, 2)], dataloaders=_loader(), cuda_available=False, send=False
    )
    assert report.finding_kinds() == () and report.ok
    assert report.models[0].name == "Linear#0" and report.dataloaders[0].num_workers == 0
    # When torch is asked, this machine has no GPU.
    assert sdk.check_environment(send=False).cuda_available is torch.cuda.is_available()


def test_a_model_split_across_devices_is_a_warning() -> None:
    class Split(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(2, 2)
            self.b = torch.nn.Linear(2, 2).to("meta")

    report = sdk.check_environment(models={"split": Split()}, cuda_available=True, send=False)
    assert report.models[0].devices == ("cpu", "meta")
    assert "model_split_devices" in report.finding_kinds()


@pytest.mark.server
def test_onnxruntime_silent_cpu_fallback_is_an_incident(agent) -> None:
    _, sink = agent
    sessions = {
        "fallback": (
            StandInSession(["CPUExecutionProvider"]),
            ["CUDAExecutionProvider", "CPUExecutionProvider"],
        ),
        "partial": StandInSession(
            ["CUDAExecutionProvider", "CPUExecutionProvider"],
            requested=[
                ("TensorrtExecutionProvider", {"trt_fp16_enable": True}),
                "CUDAExecutionProvider",
                "CPUExecutionProvider",
            ],
        ),
        "good": (
            StandInSession(["CUDAExecutionProvider", "CPUExecutionProvider"]),
            ["CUDAExecutionProvider"],
        ),
        "cpu_on_purpose": (StandInSession(["CPUExecutionProvider"]), ["CPUExecutionProvider"]),
    }
    report = sdk.check_environment(onnx_sessions=sessions)
    by_name = {s.name: s for s in report.onnx_sessions}
    assert by_name["fallback"].fell_back_to_cpu and by_name["fallback"].missing == ("CUDAExecutionProvider",)
    assert not by_name["partial"].fell_back_to_cpu and by_name["partial"].missing == (
        "TensorrtExecutionProvider",
    )
    assert by_name["partial"].requested == (
        "TensorrtExecutionProvider",
        "CUDAExecutionProvider",
        "CPUExecutionProvider",
    )
    assert not by_name["good"].missing and not by_name["cpu_on_purpose"].fell_back_to_cpu
    fallback = [f for f in report.findings if f.kind == "onnxruntime_cpu_fallback"]
    assert (
        len(fallback) == 1 and fallback[0].severity == "error" and fallback[0].facts["session"] == "fallback"
    )
    assert [f.facts["session"] for f in report.findings if f.kind == "onnxruntime_provider_missing"] == [
        "partial"
    ]
    sdk.flush(5.0)
    assert sink.wait_for(lambda s: len(s.inventory("onnxruntime_session")) == 4)
    incident = sink.incidents("onnxruntime_cpu_fallback")[0]
    assert facts(incident)["actual"] == "CPUExecutionProvider"
    assert facts(incident)["requested"] == "CUDAExecutionProvider,CPUExecutionProvider"
    fb = next(r for r in sink.inventory("onnxruntime_session") if r.name == "fallback")
    assert facts(fb)["fell_back_to_cpu"] is True


def test_an_unknown_request_on_a_gpu_machine_with_only_cpu_is_a_warning() -> None:
    report = sdk.check_environment(
        onnx_sessions=[StandInSession(["CPUExecutionProvider"])], cuda_available=True, send=False
    )
    assert report.onnx_sessions[0].requested is None
    [finding] = [f for f in report.findings if f.kind == "onnxruntime_cpu_fallback"]
    assert finding.severity == "warning"


def test_precision_support_by_compute_capability() -> None:
    jetson_nano, v100, t4, orin, h100 = (
        precision_support(*cc) for cc in ((5, 3), (7, 0), (7, 5), (8, 7), (9, 0))
    )
    assert jetson_nano.fp16 and not jetson_nano.fp16_tensor_cores and not jetson_nano.bf16
    assert v100.fp16_tensor_cores and not v100.int8_tensor_cores and not v100.tf32
    assert t4.int8_tensor_cores and not t4.bf16
    assert orin.bf16 and orin.tf32 and not orin.fp8
    assert h100.fp8 and h100.bf16
    assert not precision_support(5, 2).fp16


def test_settings_are_read_not_changed_and_the_report_is_frozen() -> None:
    before = (torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision())
    report = sdk.check_environment(send=False)
    assert (torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision()) == before
    assert report.cudnn_benchmark == before[0] and report.float32_matmul_precision == before[1]
    assert report.matmul_allow_tf32 is not None and report.cudnn_allow_tf32 is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.cuda_available = True  # type: ignore[misc]
    json.dumps(report.to_dict(), default=str)


def test_cuda_visible_devices_without_a_usable_gpu_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    report = sdk.check_environment(cuda_available=False, send=False)
    assert report.cuda_visible_devices == "0,1"
    assert "cuda_unavailable" in report.finding_kinds()


def test_doctor_help_json_and_text(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        sdk.doctor_main(["--help"])
    assert exit_.value.code == 0
    assert "fleetscope doctor" in capsys.readouterr().out
    assert sdk.doctor_main(["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["torch_version"] == torch.__version__ and data["ok"] is True
    assert sdk.doctor_main([]) == 0
    out = capsys.readouterr().out
    assert "torch" in out and "CPU-only build" in out


@pytest.mark.server
def test_doctor_send_reaches_the_agent(agent, capsys: pytest.CaptureFixture[str]) -> None:
    server, sink = agent
    assert sdk.doctor_main(["--send", "--assume-gpu", "--socket", server.socket_path]) == 0
    capsys.readouterr()
    assert sink.wait_for(lambda s: bool(s.inventory("environment")))
    assert facts(sink.inventory("environment")[0])["cuda_available"] is True
