"""Config files (--config, TOML) and the one precedence: flag > environment variable > file > default.

Every case goes through the real router's parser (``fleetscope.cli.build_parser``) and the
config layer ``fleetscope.cli.main`` uses, so a flag added to a command is covered as it is.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetscope.cli import build_parser, main
from fleetscope.cli import config as config_cli

ENV = ["FLEETSCOPE_TOKEN", "FLEETSCOPE_COLLECTOR", "FLEETSCOPE_NAME", "FLEETSCOPE_SPOOL", "FLEETSCOPE_SDK_SOCKET",
       "FLEETSCOPE_DB", "FLEETSCOPE_LISTEN", "FLEETSCOPE_CONFIG", "FLEETSCOPE_LOG_FORMAT"]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def parse(argv: list[str]):  # type: ignore[no-untyped-def]
    return config_cli.parse(build_parser(), argv)


def write(tmp_path: Path, text: str, name: str = "fleetscope.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# (command, key in the file, dest, env var, default, file value (TOML), file's effect, env value, env's effect,
#  flag argv, flag's effect)
CASES = [
    ("agent", "token", "token", "FLEETSCOPE_TOKEN", "", '"from-file"', "from-file", "from-env", "from-env",
     ["--token", "from-flag"], "from-flag"),
    ("agent", "collector", "collector", "FLEETSCOPE_COLLECTOR", None, '["f1:1", "f2:2"]', ["f1:1", "f2:2"],
     "e1:1,e2:2", ["e1:1", "e2:2"], ["--collector", "c:3"], ["c:3"]),
    ("agent", "spool", "spool", "FLEETSCOPE_SPOOL", None, '"/file/spool"', Path("/file/spool"), "/env/spool",
     Path("/env/spool"), ["--spool", "/flag/spool"], Path("/flag/spool")),
    ("collector", "db", "db", "FLEETSCOPE_DB", "sqlite:///fleetscope-data/fleetscope.db", '"sqlite:///file.db"',
     "sqlite:///file.db", "sqlite:///env.db", "sqlite:///env.db", ["--db", "sqlite:///flag.db"], "sqlite:///flag.db"),
    ("collector", "listen", "listen", "FLEETSCOPE_LISTEN", "127.0.0.1:4317", '"0.0.0.0:4400"', "0.0.0.0:4400",
     "127.0.0.1:4500", "127.0.0.1:4500", ["--listen", "127.0.0.1:4600"], "127.0.0.1:4600"),
    ("collector", "token", "token", "FLEETSCOPE_TOKEN", None, '"t-file"', "t-file", "t-env", "t-env",
     ["--token", "t-flag"], "t-flag"),
    ("dashboard", "db", "db", "FLEETSCOPE_DB", "sqlite:///fleetscope-data/fleetscope.db", '"sqlite:///file.db"',
     "sqlite:///file.db", "sqlite:///env.db", "sqlite:///env.db", ["--db", "sqlite:///flag.db"], "sqlite:///flag.db"),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_flag_beats_env_beats_file_beats_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: tuple) -> None:
    command, key, dest, env, default, toml_value, file_effect, env_value, env_effect, flag, flag_effect = case
    base = [command] + (["--collector", "x:1"] if command == "simulate" else [])
    if command == "agent" and key == "spool":
        default = parse(base).spool  # depends on the user running the test
    # the default alone
    assert getattr(parse(base), dest) == default
    # the file beats the default
    cfg = write(tmp_path, f"[{command}]\n{key} = {toml_value}\n")
    assert getattr(parse([*base, "--config", str(cfg)]), dest) == file_effect
    # the environment beats the file (read now, not when the parser's module was imported)
    monkeypatch.setenv(env, env_value)
    assert getattr(parse([*base, "--config", str(cfg)]), dest) == env_effect
    # the flag beats the environment (and the file), wherever --config stands
    assert getattr(parse([*base, "--config", str(cfg), *flag]), dest) == flag_effect
    assert getattr(parse([*base, *flag, "--config", str(cfg)]), dest) == flag_effect


@pytest.mark.parametrize(
    "command, toml, flag, dest, file_effect, flag_effect",
    [
        ("agent", 'interval = "500ms"', ["--interval", "2s"], "interval", 0.5, 2.0),
        ("agent", "no-kernel-log = true", [], "no_kernel_log", True, True),
        ("agent", 'label = { site = "lab", fleet = "drones" }', ["--label", "site=field"], "label",
         [("site", "lab"), ("fleet", "drones")], [("site", "field")]),
        ("agent", 'label = ["site=lab"]', [], "label", [("site", "lab")], [("site", "lab")]),
        ("agent", 'spool_max_size = "64MiB"', ["--spool-max-size", "1GiB"], "spool_max_size", 64 << 20, 1 << 30),
        ("collector", 'quiet-period = "5m"', ["--quiet-period", "1m"], "quiet_period", 300 * 10**9, 60 * 10**9),
        ("collector", "workers = 4", ["--workers", "2"], "workers", 4, 2),
        ("collector", "no_rollups = true", [], "no_rollups", True, True),
        ("dashboard", "port = 8600", ["--port", "8700"], "port", 8600, 8700),
        ("dashboard", 'address = "0.0.0.0"', ["--address", "127.0.0.2"], "address", "0.0.0.0", "127.0.0.2"),
        ("dashboard", 'log_format = "json"', ["--log-format", "text"], "log_format", "json", "text"),
    ],
)
def test_options_without_env_flag_beats_file(tmp_path: Path, command: str, toml: str, flag: list[str], dest: str,
                                              file_effect: object, flag_effect: object) -> None:
    cfg = write(tmp_path, f"[{command}]\n{toml}\n")
    assert getattr(parse([command, "--config", str(cfg)]), dest) == file_effect
    # a repeatable flag replaces the file's list, it does not add to it
    assert getattr(parse([command, "--config", str(cfg), *flag]), dest) == flag_effect


def test_one_file_serves_several_commands(tmp_path: Path) -> None:
    cfg = write(tmp_path, """
[agent]
collector = ["c1:4317"]
interval = "2s"

[collector]
listen = "0.0.0.0:4317"

[dashboard]
port = 9000
""")
    agent = parse(["agent", "--config", str(cfg)])
    assert agent.collector == ["c1:4317"] and agent.interval == 2.0
    assert parse(["collector", "--config", str(cfg)]).listen == "0.0.0.0:4317"
    dash = parse(["dashboard", "--config", str(cfg)])
    assert dash.port == 9000 and not hasattr(dash, "listen")


def test_config_file_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = write(tmp_path, "[collector]\nworkers = 3\n")
    monkeypatch.setenv("FLEETSCOPE_CONFIG", str(cfg))
    assert parse(["collector"]).workers == 3
    other = write(tmp_path, "[collector]\nworkers = 5\n", "other.toml")
    assert parse(["collector", "--config", str(other)]).workers == 5  # the flag names another file


# ------------------------------------------------------------------------------ mistakes


MISTAKES = [
    ("agent", "[agent]\nintervall = \"1s\"\n", ["'intervall'", "[agent]", "line 2", "did you mean 'interval'"]),
    ("collector", "[collector]\n# the port\nlisten = \"0.0.0.0:4317\"\ndatabase = \"x\"\n", ["'database'", "line 4"]),
    ("dashboard", "[dashboard]\nport = \"http\"\n", ["port", "line 2", "int"]),
    ("dashboard", "[dashboard]\nport = 8600\nlisten = \"x\"\n", ["'listen'", "[dashboard]", "line 3"]),
    ("agent", "[agent]\ninterval = \"fast\"\n", ["interval", "not a duration"]),
    ("agent", "[agent]\nno-gpu = \"yes\"\n", ["no-gpu", "true or false"]),
    ("agent", "[agent]\ninterval = true\n", ["interval", "true/false"]),
    ("agent", "[agent]\nname = [\"a\", \"b\"]\n", ["name", "a list"]),
    ("agent", "[agent]\njetson-source = \"gpu\"\n", ["jetson-source", "not one of"]),
    ("agent", "[agent]\ninterval = \n", ["not valid TOML", "line 2"]),
    ("agent", "[agnet]\ninterval = \"1s\"\n", ["[agnet]", "did you mean 'agent'"]),
    ("agent", "token = \"x\"\n", ["'token'", "outside a table"]),
    # a wrong key in another command's table fails too: the file is checked whole
    ("agent", "[agent]\n[collector]\nlissen = \"x\"\n", ["'lissen'", "[collector]", "line 3"]),
    ("collector", "[collector]\ntoken = \"a\"\ntokens-file = \"/t\"\n", ["token and tokens-file"]),
]


@pytest.mark.parametrize("command, text, needles", MISTAKES, ids=[f"{m[0]}-{i}" for i, m in enumerate(MISTAKES)])
def test_a_mistake_names_key_and_file_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str,
                                                  text: str, needles: list[str]) -> None:
    cfg = write(tmp_path, text)
    with pytest.raises(SystemExit) as exc:
        main([command, "--config", str(cfg)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line, no traceback
    assert str(cfg) in err and err.startswith(f"fleetscope {command}: config ")
    for needle in needles:
        assert needle in err, (needle, err)


def test_a_missing_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["collector", "--config", str(tmp_path / "nope.toml")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope.toml" in err and "cannot read" in err


def test_a_bad_environment_value_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FLEETSCOPE_LOG_FORMAT", "xml")
    with pytest.raises(SystemExit) as exc:
        main(["collector"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "FLEETSCOPE_LOG_FORMAT" in err


# ------------------------------------------------------------------------------ config show


def test_config_show_reports_sources_and_masks_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write(tmp_path, """
[collector]
token = "file-secret-token"
listen = "0.0.0.0:4317"
quiet_period = "5m"
db = "postgresql+psycopg://fleet:db-secret-pw@db.example/fleetscope"
""")
    monkeypatch.setenv("FLEETSCOPE_LISTEN", "127.0.0.1:4999")
    assert main(["config", "show", "--config", str(cfg), "--json", "collector", "--workers", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_key = {s["key"]: s for s in doc["settings"]}
    assert doc["command"] == "collector" and doc["config"] == str(cfg)
    assert by_key["workers"] == {"key": "workers", "value": 2, "source": "flag", "secret": False}
    assert by_key["listen"]["source"] == "env FLEETSCOPE_LISTEN" and by_key["listen"]["value"] == "127.0.0.1:4999"
    assert by_key["quiet-period"]["source"] == f"file {cfg}" and by_key["quiet-period"]["value"] == 300 * 10**9
    assert by_key["token"]["source"] == f"file {cfg}" and by_key["token"]["secret"]
    assert by_key["token"]["value"] == "********"
    assert by_key["db"]["value"] == "postgresql+psycopg://fleet:********@db.example/fleetscope"
    assert by_key["max-batch-size"]["source"] == "default"
    assert by_key["config"]["source"] == "flag"

    # the table: the same sources, and no secret anywhere in the output
    monkeypatch.setenv("FLEETSCOPE_TOKEN", "env-secret-token")
    assert main(["config", "show", "--config", str(cfg), "collector"]) == 0
    out = capsys.readouterr().out
    assert "secret" not in out.replace("SOURCE", "")
    rows = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert rows["token"].split()[-2:] == ["env", "FLEETSCOPE_TOKEN"] and "********" in rows["token"]
    assert rows["listen"].endswith("env FLEETSCOPE_LISTEN")
    assert rows["quiet-period"].endswith(f"file {cfg}")
    assert rows["grace"].endswith("default")


def test_config_show_for_the_agent_and_the_dashboard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write(tmp_path, '[agent]\ntoken = "agent-secret"\ninterval = "5s"\n[dashboard]\nport = 8600\n')
    monkeypatch.setenv("FLEETSCOPE_CONFIG", str(cfg))
    assert main(["config", "show", "--json", "agent", "--name", "drone-7"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_key = {s["key"]: s for s in doc["settings"]}
    assert by_key["name"]["source"] == "flag" and by_key["name"]["value"] == "drone-7"
    assert by_key["interval"]["source"] == f"file {cfg}" and by_key["interval"]["value"] == 5.0
    assert by_key["token"]["value"] == "********"
    assert by_key["config"]["source"] == "env FLEETSCOPE_CONFIG"
    assert "agent-secret" not in json.dumps(doc)
    assert main(["config", "show", "--json", "dashboard", "--password-env", "DASH_PW"]) == 0
    by_key = {s["key"]: s for s in json.loads(capsys.readouterr().out)["settings"]}
    assert by_key["port"] == {"key": "port", "value": 8600, "source": f"file {cfg}", "secret": False}
    assert by_key["password-env"]["value"] == "DASH_PW"  # the name of a variable, not the password


def test_config_show_refuses_a_bad_file_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write(tmp_path, "[dashboard]\nprot = 1\n")
    assert main(["config", "show", "--config", str(cfg), "dashboard"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'prot'" in err and str(cfg) in err


def test_every_long_running_command_takes_config_and_log_format() -> None:
    parser = build_parser()
    sub = config_cli._subparsers(parser)
    for name in config_cli.LONG_RUNNING:
        options = {s for a in sub.choices[name]._actions for s in a.option_strings}
        assert {"--config", "--log-format"} <= options, name


def test_the_collector_runs_with_the_file_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The handler gets what the file says: the settings object built from args carries it."""
    import fleetscope.collector.ingest.server as server

    seen = {}

    class FakeCollector:
        def __init__(self, settings):  # type: ignore[no-untyped-def]
            seen["settings"] = settings

        def serve(self) -> None:
            pass

    monkeypatch.setattr(server, "Collector", FakeCollector)
    cfg = write(tmp_path, f'[collector]\nlisten = "127.0.0.1:4555"\ndb = "sqlite:///{tmp_path}/x.db"\n'
                          'token = "file-token"\nquiet-period = "2m"\nno-rollups = true\n')
    assert main(["collector", "--config", str(cfg)]) == 0
    s = seen["settings"]
    assert s.listen == "127.0.0.1:4555" and s.db_url == f"sqlite:///{tmp_path}/x.db"
    assert s.tokens == frozenset(["file-token"]) and s.rollups is False


def test_a_required_flag_may_come_from_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write(tmp_path, '[simulate]\ncollector = ["127.0.0.1:4317"]\ndevices = 3\n')
    args = parse(["simulate", "--config", str(cfg)])
    assert args.collector == ["127.0.0.1:4317"] and args.devices == 3
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--devices", "2"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "collector is required" in err and "[simulate]" in err


def test_a_flag_added_to_a_command_works_in_the_file_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing in the config layer names the flags: a new one (with its env var in its help) just works."""
    from fleetscope.cli.args import duration_s

    parser = build_parser()
    collector = config_cli._subparsers(parser).choices["collector"]
    collector.add_argument("--brand-new-interval", type=duration_s, default=5.0,
                           help="something new (env FLEETSCOPE_BRAND_NEW_INTERVAL)")
    cfg = write(tmp_path, '[collector]\nbrand_new_interval = "250ms"\n')
    assert config_cli.parse(parser, ["collector"]).brand_new_interval == 5.0
    assert config_cli.parse(parser, ["collector", "--config", str(cfg)]).brand_new_interval == 0.25
    monkeypatch.setenv("FLEETSCOPE_BRAND_NEW_INTERVAL", "2s")
    assert config_cli.parse(parser, ["collector", "--config", str(cfg)]).brand_new_interval == 2.0
    assert config_cli.parse(parser, ["collector", "--config", str(cfg), "--brand-new-interval", "1m"]).brand_new_interval == 60.0
    bad = write(tmp_path, '[collector]\nbrand-new-interval = "soon"\n', "bad.toml")
    with pytest.raises(SystemExit):
        config_cli.parse(parser, ["collector", "--config", str(bad)])
