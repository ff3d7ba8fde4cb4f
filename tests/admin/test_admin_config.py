"""Configuration as an operator meets it: a bad value of any variable stops
zkwarden with exit code 2 and one line naming the variable, the value and
what is allowed; --check-config prints the resolved configuration and never
a secret; --help, --version, --list-metrics, --list-config; docs/metrics.md's
and docs/configuration.md's tables are the generated ones; the admin port taken stops the start."""

import os
import re
import socket
import subprocess

import pytest

from zkharness import HOST, free_port

UPSTREAM_OK = "127.0.0.1:2181"

# variable -> (a bad value, a fragment of what the error says is allowed)
BAD = {
    "ZKWARDEN_UPSTREAM": ("zk-without-port", "host:port"),
    "ZKWARDEN_LISTEN": ("localhost:2181", "numeric ip:port"),
    "ZKWARDEN_ADMIN_LISTEN": ("127.0.0.1:99999", "numeric ip:port"),
    "ZKWARDEN_MAX_FRAME": ("7", "an integer from 8 to"),
    "ZKWARDEN_MAX_REPLY_FRAME": ("64MiB", "an integer from 16 to"),
    "ZKWARDEN_CONNECT_TIMEOUT_MS": ("0", "an integer from 1 to 600000"),
    "ZKWARDEN_HANDSHAKE_TIMEOUT_MS": ("600001", "an integer from 1 to 600000"),
    "ZKWARDEN_MAX_CLIENTS": ("0", "an integer from 1 to 1000000"),
    "ZKWARDEN_ADMIN_REMOTE": ("everyone", "probes or all"),
    "ZKWARDEN_UPSTREAM_TLS": ("yes", "on or off"),
    "ZKWARDEN_ZOMBIE_MOVE": ("1", "on or off"),
    "ZKWARDEN_SESSION_MOVE": ("yes", "on or off"),
    "ZKWARDEN_TLS_CA_FILE": ("/nonexistent/ca.crt", "a readable PEM file"),
    "ZKWARDEN_TLS_CERT_FILE": ("/nonexistent/tls.crt", "a readable PEM file"),
    "ZKWARDEN_TLS_KEY_FILE": ("/nonexistent/tls.key", "together with ZKWARDEN_TLS_CERT_FILE"),
    "ZKWARDEN_TLS_SERVER_NAME": ("zk/0", "a DNS name or an IP address"),
    "ZKWARDEN_MODE": ("proxy", "sidecar, observe or relay"),
    "ZKWARDEN_IDENTITY": ("jm/0", "[A-Za-z0-9._-]"),
    "ZKWARDEN_REGISTRY_ROOT": ("zkwarden", "absolute znode path"),
    "ZKWARDEN_REGISTRY_AUTH": ("no-colon-canary-secret", "user:password"),
    "ZKWARDEN_REGISTRY_AUTH_FILE": ("/nonexistent/registry-auth", "readable file"),
    "ZKWARDEN_LOCK_ROOTS": ("flink", "/"),
    "ZKWARDEN_FENCE_TIMEOUT_MS": ("-1", "an integer from 1 to"),
    "ZKWARDEN_ORPHAN_GRACE_MS": ("1.5", "an integer from 0 to"),
    "ZKWARDEN_SWEEP_INTERVAL_S": ("86401", "an integer from 0 to 86400"),
    "ZKWARDEN_SWEEP_TREES": ("/elsewhere/c1", "below one of ZKWARDEN_LOCK_ROOTS"),
    "ZKWARDEN_SWEEP_MAX_NODES": ("99", "an integer from 100 to"),
    "ZKWARDEN_SWEEP_WATCH": ("auto", "on or off"),
    "ZKWARDEN_LOG_LEVEL": ("verbose", "error, warn, info, debug"),
    "ZKWARDEN_LOG_FORMAT": ("xml", "text or json"),
    "ZKWARDEN_LOG_FILE": ("/nonexistent-dir/zkwarden.log", "opened for appending"),
    "ZKWARDEN_AUDIT_FILE": ("/nonexistent-dir/audit.jsonl", "opened for appending"),
    "ZKWARDEN_MAX_BUFFERED_BYTES": ("1048575", "an integer from 1048576 to"),
    "ZKWARDEN_DURABLE_SESSIONS": ("4097", "an integer from 0 to 4096"),
    "ZKWARDEN_KEEPER": ("yes", "on or off"),
    "ZKWARDEN_KEEPER_SOCKET": ("two words", "printable characters without spaces"),
    "ZKWARDEN_TAKEOVER": ("1", "on or off"),
}
SECRETS = {"ZKWARDEN_REGISTRY_AUTH"}
# Tried on variables added later that have no row above yet.
GENERIC_BAD = ["", "-1", "not a value", "9" * 30, "/", "x:y:z", "\x01", "a" * 5000]


def run(zkw_bin, *args, env=None, timeout=10, cwd=None):
    """Runs zkwarden (in cwd: some values are file names it creates)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("ZKWARDEN_")}
    e.update(env or {})
    return subprocess.run([zkw_bin] + list(args), env=e, capture_output=True, text=True, timeout=timeout,
                          cwd=cwd)


def variables(zkw_bin):
    out = run(zkw_bin, "--help").stdout
    return re.findall(r"^  (ZKWARDEN_[A-Z0-9_]+) ", out, re.M)


def assert_config_error(r, var, value, allowed):
    assert r.returncode == 2, (var, r.returncode, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, (var, r.stderr)
    line = lines[0]
    assert var in line
    if var in SECRETS:
        assert value not in line and "<hidden>" in line, line
    else:
        assert '%s="%s"' % (var, value) in line, line
    assert "expected" in line and allowed in line, line


def test_every_variable_has_a_bad_value_test(zkw_bin):
    """The table above covers every variable --help lists (a new variable
    must come with its bad value; until then it is probed generically in
    test_config_error_for_variables_without_a_row)."""
    missing = [v for v in variables(zkw_bin) if v not in BAD]
    assert not missing, "no bad-value row for %s" % ", ".join(missing)


@pytest.mark.parametrize("var", sorted(BAD))
def test_config_error_names_variable_value_and_what_is_allowed(zkw_bin, var):
    if var not in variables(zkw_bin):
        pytest.skip("%s is not a variable of this build" % var)
    value, allowed = BAD[var]
    # Free ports, in case a bad value were accepted and zkwarden started.
    env = {"ZKWARDEN_UPSTREAM": UPSTREAM_OK, "ZKWARDEN_LISTEN": "%s:%d" % (HOST, free_port()),
           "ZKWARDEN_ADMIN_LISTEN": "%s:%d" % (HOST, free_port()), var: value}
    r = run(zkw_bin, env=env)
    assert_config_error(r, var, value, allowed)
    # --check-config validates the same way.
    assert_config_error(run(zkw_bin, "--check-config", env=env), var, value, allowed)


def test_config_error_for_variables_without_a_row(zkw_bin, tmp_path):
    for var in variables(zkw_bin):
        if var in BAD:
            continue
        for value in GENERIC_BAD:
            r = run(zkw_bin, "--check-config", env={"ZKWARDEN_UPSTREAM": UPSTREAM_OK, var: value}, cwd=tmp_path)
            if r.returncode == 0:
                continue
            assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and var in r.stderr, (var, r.stderr)


def test_missing_upstream(zkw_bin):
    r = run(zkw_bin)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [r.stderr.strip()]
    assert "ZKWARDEN_UPSTREAM is not set; it is required" in r.stderr


def test_check_config_prints_every_variable_resolved(zkw_bin, tmp_path):
    log = tmp_path / "z.log"
    env = {"ZKWARDEN_UPSTREAM": "zk-0.zk:2181,zk-1.zk:2181", "ZKWARDEN_ADMIN_LISTEN": "0.0.0.0:9181",
           "ZKWARDEN_LOG_FILE": str(log), "ZKWARDEN_IDENTITY": "flink-jm-0"}
    r = run(zkw_bin, "--check-config", env=env)
    assert r.returncode == 0, r.stderr
    lines = dict(line.split("=", 1) for line in r.stdout.splitlines())
    assert list(lines) == variables(zkw_bin)
    assert lines["ZKWARDEN_UPSTREAM"] == "zk-0.zk:2181,zk-1.zk:2181"
    assert lines["ZKWARDEN_ADMIN_LISTEN"] == "0.0.0.0:9181"
    assert lines["ZKWARDEN_LISTEN"] == "127.0.0.1:2181"
    assert lines["ZKWARDEN_LOG_FILE"] == str(log)
    assert lines["ZKWARDEN_IDENTITY"] == "flink-jm-0"


def test_check_config_never_prints_a_secret(zkw_bin, tmp_path):
    canary = "s3cret-canary-Zq8"
    env = {"ZKWARDEN_UPSTREAM": UPSTREAM_OK, "ZKWARDEN_REGISTRY_AUTH": "flink:" + canary}
    if "ZKWARDEN_REGISTRY_AUTH" not in variables(zkw_bin):
        pytest.skip("no ZKWARDEN_REGISTRY_AUTH in this build")
    r = run(zkw_bin, "--check-config", env=env)
    assert r.returncode == 0, r.stderr
    assert canary not in r.stdout + r.stderr
    assert "ZKWARDEN_REGISTRY_AUTH=<set>\n" in r.stdout
    r = run(zkw_bin, "--check-config", env={"ZKWARDEN_UPSTREAM": UPSTREAM_OK})
    assert "ZKWARDEN_REGISTRY_AUTH=<unset>\n" in r.stdout
    # From a file: the path is shown, the content is not.
    f = tmp_path / "auth"
    f.write_text("flink:%s\n" % canary)
    r = run(zkw_bin, "--check-config", env={"ZKWARDEN_UPSTREAM": UPSTREAM_OK,
                                             "ZKWARDEN_REGISTRY_AUTH_FILE": str(f)})
    assert r.returncode == 0, r.stderr
    assert canary not in r.stdout + r.stderr and str(f) in r.stdout
    f.write_text("no-colon-%s\n" % canary)
    r = run(zkw_bin, "--check-config", env={"ZKWARDEN_UPSTREAM": UPSTREAM_OK,
                                             "ZKWARDEN_REGISTRY_AUTH_FILE": str(f)})
    assert r.returncode == 2 and canary not in r.stdout + r.stderr
    # Every variable that shows <set> is a secret: its value never appears.
    for var in variables(zkw_bin):
        r = run(zkw_bin, "--check-config", env={"ZKWARDEN_UPSTREAM": UPSTREAM_OK, var: "u:" + canary},
                cwd=tmp_path)
        if "%s=<set>" % var in r.stdout:
            assert canary not in r.stdout + r.stderr, var


def test_help_lists_every_variable_with_its_default(zkw_bin):
    r = run(zkw_bin, "--help")
    assert r.returncode == 0 and r.stderr == ""
    names = variables(zkw_bin)
    assert len(names) >= 18 and len(set(names)) == len(names)
    assert r.stdout.count("default:") == len(names)
    for flag in ("--check-config", "--list-config", "--list-metrics", "--help", "--version"):
        assert flag in r.stdout


def test_version_and_unknown_argument(zkw_bin):
    r = run(zkw_bin, "--version")
    assert r.returncode == 0 and re.fullmatch(r"zkwarden \d+\.\d+\.\d+\n", r.stdout)
    r = run(zkw_bin, "--frobnicate")
    assert r.returncode == 2 and "unknown argument '--frobnicate'" in r.stderr


def test_list_metrics_is_the_metrics_page(zkw_bin):
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run([os.path.join(here, "check_metrics_doc.sh"), zkw_bin], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr


def test_list_config_is_the_configuration_page(zkw_bin):
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run([os.path.join(here, "..", "check_docs.sh"), zkw_bin], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr


def test_admin_port_in_use_stops_the_start(zkw_bin):
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        env = {"ZKWARDEN_UPSTREAM": UPSTREAM_OK, "ZKWARDEN_LISTEN": "%s:%d" % (HOST, free_port()),
               "ZKWARDEN_ADMIN_LISTEN": "%s:%d" % (HOST, port), "ZKWARDEN_IDENTITY": "jm-test",
               "ZKWARDEN_ORPHAN_GRACE_MS": "0", "ZKWARDEN_SWEEP_INTERVAL_S": "0"}
        r = run(zkw_bin, env=env, timeout=15)
    assert r.returncode == 1
    assert "cannot listen on %s:%d (ZKWARDEN_ADMIN_LISTEN): address already in use" % (HOST, port) in r.stderr
