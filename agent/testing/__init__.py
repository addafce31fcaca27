"""Recorded-hardware fakes and replay parsers for tests, benchmarks and simulation:
``fake_nvml`` (a stand-in for ``pynvml`` that replays recorded GPUs) and ``nvidia_smi``
(``nvidia-smi`` captures read into samples). Never imported by the daemon, the samplers, the log
sources or the classifiers; importing this package imports none of its modules."""

__all__ = ["fake_nvml", "nvidia_smi"]
