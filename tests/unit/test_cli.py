import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mrc.errors import PrivilegeError
from mrc.fabric import apply
from mrc.tools import cli
from mrc.units import parse_rate

ROOT = Path(__file__).resolve().parents[2]


def run(*argv):
    return subprocess.run([sys.executable, "-m", "mrc", *argv], capture_output=True, text=True)


@pytest.mark.parametrize("argv,msg", [
    (["fabric", "up", "--planes", "0"], "--planes: wants an integer from 1 to 16"),
    (["fabric", "up", "--hosts", "1", "--leaves", "1"], "--hosts: wants an integer from 2"),
    (["fabric", "up", "--name", "Bad_Name"], "not valid"),
    (["fabric", "up", "--link-rate", "100mbit", "--trim-kb", "600"], "must be below --buffer-kb"),
    (["fabric", "up", "--link-rate", "fast"], "cannot read rate"),
    (["fabric", "qos", "all", "--rate", "1mbit", "--ecn-kb=-1"], "--ecn-kb: wants an integer from 0"),
    (["sim", "--hosts", "9000"], "--hosts: wants an integer from 2 to 8192"),
    (["sim", "--hosts", "8", "--fail", "t1:0.99@1us"], "spine 99 does not exist"),
    (["sim", "--hosts", "8", "--flap", "link:0.0.0/1ms"], "say how long it flaps"),
    (["sim", "--hosts", "8", "--hop-delay", "soon"], "cannot read time"),
    (["sim", "--hosts", "4", "--workload", "victim"], "needs 9 hosts"),
])
def test_bad_input_is_one_line_and_exit_2(argv, msg):
    r = run(*argv)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and msg in lines[0] and lines[0].startswith("mrc")


def test_no_fabric_with_that_name(tmp_path, monkeypatch):
    monkeypatch.setattr(apply, "STATE_DIR", str(tmp_path))
    monkeypatch.setattr(apply.ns, "list_netns", lambda: [])
    assert cli.main(["fabric", "status", "--name", "nosuch"]) == 2


def test_without_root_the_message_says_sudo(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(PrivilegeError, match="needs root.*sudo"):
        apply.require_root("mrc fabric up")


def test_paths_json_lists_every_path(tmp_path, monkeypatch):
    from mrc.fabric.topology import Topology

    monkeypatch.setattr(apply, "STATE_DIR", str(tmp_path))
    apply.save_state(Topology(name="x", planes=2, spines=2, leaves=2, hosts=2))
    r = subprocess.run([sys.executable, "-m", "mrc", "fabric", "paths", "--name", "x", "--json"],
                       capture_output=True, text=True, env={**os.environ, "MRC_STATE_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    paths = json.loads(r.stdout)
    assert len(paths) == 2 * 2 * 2
    assert set(paths[0]) == {"src", "dst", "plane", "spine", "address"}


def test_help_explains():
    r = run("fabric", "--help")
    assert r.returncode == 0 and "End next-CSID" in r.stdout and "h0-p0l0" in r.stdout


def test_project_namespaces_selects_only_ours():
    names = ["mrc-a-h0", "mrc-a-p0l0", "mrc-b-h0", "other", "mrcx"]
    assert apply.project_namespaces(names, "a") == ["mrc-a-h0", "mrc-a-p0l0"]
    assert apply.project_namespaces(names) == ["mrc-a-h0", "mrc-a-p0l0", "mrc-b-h0"]


def test_rate_parsing():
    assert parse_rate("1gbit") == 10**9
    assert parse_rate("500mbit") == 5 * 10**8
    with pytest.raises(Exception, match="cannot read rate"):
        parse_rate("fast")


def test_core_package_imports_without_scapy():
    code = "import sys; sys.modules['scapy'] = None; import mrc, mrc.wire, mrc.fabric.apply, mrc.tools.cli; print('ok')"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_core_and_the_dash_model_import_without_the_dash_extra():
    code = ("import sys; sys.modules['aiohttp'] = None; sys.modules['selenium'] = None; "
            "import mrc, mrc.tools.cli, mrc.tools.demo, mrc.dash.model, mrc.dash.collect; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_dash_without_aiohttp_says_what_to_install():
    code = ("import sys; sys.modules['aiohttp'] = None; from mrc.dash import server; server._web()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode != 0 and "pip install 'mrc[dash]'" in r.stderr


@pytest.mark.parametrize("argv, msg", [
    (["dash", "--port", "70000"], "--port: wants an integer from 1 to 65535"),
    (["dash", "--port", "0"], "--port: wants an integer from 1 to 65535"),
    (["dash", "--hz", "100"], "--hz: wants a number from 0.5 to 20"),
    (["dash", "--hz", "nan"], "--hz: wants a number from 0.5 to 20"),
    (["demo", "--dash", "--dash-port", "0"], "--dash-port: wants an integer from 1 to 65535"),
    (["demo", "--dash", "--dash-wait", "-1"], "--dash-wait: wants a number from 0 to 3600"),
    (["demo", "--dash", "--dash-linger", "1e9"], "--dash-linger: wants a number from 0 to 3600"),
])
def test_dash_flags_out_of_range_are_refused_before_anything_is_built(argv, msg):
    r = run(*argv)
    assert r.returncode == 2 and msg in r.stderr, r.stderr


def test_dash_help_explains_the_token_and_the_bind_address():
    r = run("dash", "--help")
    assert r.returncode == 0 and "token" in r.stdout and "127.0.0.1" in r.stdout
    r = run("demo", "--help")
    assert r.returncode == 0 and "--dash" in r.stdout


def test_sim_prints_json_a_script_can_read():
    r = run("sim", "--hosts", "4", "--planes", "2", "--size", "1M", "--single-path", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["fabric"]["hosts"] == 4 and out["spray"]["nics"] == 4 and out["spray"]["unfinished"] == 0
    assert out["spray"]["qp_errors"] == 0 and out["single_path"]["single_path"] is True
    assert out["fabric"]["paced"] is True  # NICs pace their ports unless told not to


def test_sim_quiet_changes_nothing_on_stdout_and_help_says_where_progress_goes():
    """--quiet runs without the slices progress needs: the JSON is the same, but for the times."""
    outs = []
    for extra in ((), ("--quiet",)):
        r = run("sim", "--hosts", "8", "--planes", "2", "--size", "2M", "--json", *extra)
        assert r.returncode == 0 and r.stderr == "", r.stderr  # a run under 10 s of CPU logs no progress
        out = json.loads(r.stdout)["spray"]
        outs.append({k: v for k, v in out.items() if k not in ("wall_s", "sim_pps", "sim_data_pps", "peak_rss_mb")})
    assert outs[0] == outs[1]
    r = run("sim", "--help")
    assert "--quiet" in r.stdout and "progress on stderr" in r.stdout


def test_sim_no_pacing_takes_no_value():
    r = run("sim", "--hosts", "4", "--no-pacing=yes")
    assert r.returncode == 2 and "--no-pacing: ignored explicit argument 'yes'" in r.stderr, r.stderr


def test_sim_no_pacing_runs_the_control_and_says_so():
    r = run("sim", "--hosts", "4", "--planes", "2", "--size", "1M", "--no-pacing", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["fabric"]["paced"] is False and out["spray"]["unfinished"] == 0 and out["spray"]["qp_errors"] == 0


def test_a_reader_that_goes_away_ends_the_command_without_a_traceback():
    """`mrc ... | head -1`: the pipe's reader is gone when mrc writes; one quiet exit (141, as a
    shell reports SIGPIPE), no traceback on stderr."""
    p = subprocess.Popen([sys.executable, "-m", "mrc", "sim", "--hosts", "4", "--planes", "2", "--size", "1M",
                          "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # before the run prints anything
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_a_token_file_must_hold_a_usable_token(tmp_path):
    """--token-file (mrc dash, mrc ctl metrics): missing, short, or with what a header cannot carry."""
    from mrc.errors import UsageError
    from mrc.tools.args import read_token

    cases = [(tmp_path / "missing", None, "cannot read the token file"), (tmp_path / "short", b"abc\n", "at least 16"),
             (tmp_path / "space", b"abcdefgh ijklmnopq", "without spaces"),
             (tmp_path / "utf8", "é".encode() * 10, "printable ASCII")]
    for path, data, says in cases:
        if data is not None:
            path.write_bytes(data)
        with pytest.raises(UsageError, match=says):
            read_token(str(path))
    good = tmp_path / "good"
    good.write_bytes(b"  " + b"t" * 20 + b"\n")
    assert read_token(str(good)) == "t" * 20


def test_a_security_mode_that_is_not_one_is_refused():
    r = subprocess.run([sys.executable, "-m", "mrc", "perf", "client", "h1", "--security", "strong"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--security" in r.stderr and "Traceback" not in r.stderr


def _clidoc():
    from tests.unit.tooling import load_tool

    return load_tool("clidoc")


def test_the_command_line_page_is_what_the_parsers_say():
    """docs/cli.md is generated from the parsers (tools/clidoc.py): a new option without the page
    regenerated fails here, and the page names every subcommand, the simulator's sweep included."""
    clidoc = _clidoc()
    text = clidoc.render()
    assert (ROOT / "docs" / "cli.md").read_text() == text, "run `python tools/clidoc.py`"
    for heading in ("`mrc sim sweep`", "`mrc fabric exec`", "`mrc ctl cc set`", "`mrc verbs run`"):
        assert heading in text
    assert "--single-path" in text and "--victim-at" in text


def test_a_changed_option_fails_the_page_check(monkeypatch):
    from mrc.tools.cmd import soak

    real = soak.add_parser

    def more(sub):
        real(sub)
        sub.choices["soak"].add_argument("--extra-knob", help="a knob nobody documented")

    monkeypatch.setattr(soak, "add_parser", more)
    assert "--extra-knob" in _clidoc().render()
    assert (ROOT / "docs" / "cli.md").read_text() != _clidoc().render()
