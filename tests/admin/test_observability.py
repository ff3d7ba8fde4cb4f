"""The Grafana dashboard and the Prometheus alert rules under deploy/:

- the rules file passes `promtool check rules`, and `promtool test rules`
  (deploy/prometheus/zkwarden-rules.test.yaml) has a case in which each
  alert fires, on series where another sidecar stays quiet;
- the PrometheusRule manifest holds exactly the rules file's groups;
- every dashboard query is valid PromQL (checked by promtool as recording
  rules), on the data source and sidecar variables;
- every metric named in the dashboard and the rules exists in a live
  zkwarden's /metrics."""

import json
import os
import re
import subprocess

import pytest
import yaml

pytestmark = pytest.mark.zkwarden

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PROM = os.path.join(REPO, "deploy", "prometheus")
RULES = os.path.join(PROM, "zkwarden-rules.yaml")
RULES_TEST = os.path.join(PROM, "zkwarden-rules.test.yaml")
OPERATOR_RULE = os.path.join(PROM, "zkwarden-prometheusrule.yaml")
DASHBOARD = os.path.join(REPO, "deploy", "grafana", "zkwarden-dashboard.json")

# What an operator needs to see during an incident (issue 16).
DASHBOARD_MUST_SHOW = ["zkwarden_identity_incarnation", "zkwarden_fences_total", "zkwarden_fence_failures_total",
                       "zkwarden_reclaims_at_create_total", "zkwarden_reclaims_at_delete_total",
                       "zkwarden_reclaim_failures_total", "zkwarden_stale_locks_swept_total",
                       "zkwarden_sessions_active", "zkwarden_upstream_reachable", "zkwarden_ready",
                       "zkwarden_request_duration_seconds_bucket"]
ALERTS = ["ZkwardenIdentityConflict", "ZkwardenRegistryErrors", "ZkwardenReclaimFailures", "ZkwardenNotReady",
          "ZkwardenNoUpstream", "ZkwardenCertificateExpiresSoon"]


def need(promtool):
    if not promtool:
        pytest.fail("promtool unavailable (tests/admin/get-promtool.sh could not fetch it)")
    return promtool


def run(cmd, cwd=None):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=cwd)
    assert r.returncode == 0, "%s:\n%s%s" % (" ".join(cmd), r.stdout, r.stderr)
    return r.stdout


def rules_groups():
    return yaml.safe_load(open(RULES))["groups"]


def dashboard_exprs():
    dash = json.load(open(DASHBOARD))
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]


def rule_exprs():
    return [r["expr"] for g in rules_groups() for r in g["rules"]]


def test_rules_pass_promtool_and_each_alert_fires_in_its_test(promtool):
    need(promtool)
    out = run([promtool, "check", "rules", RULES])
    assert "SUCCESS" in out
    out = run([promtool, "test", "rules", os.path.basename(RULES_TEST)], cwd=PROM)
    assert "SUCCESS" in out
    names = [r["alert"] for g in rules_groups() for r in g["rules"]]
    for a in ALERTS:
        assert a in names
    fired = {case["alertname"] for t in yaml.safe_load(open(RULES_TEST))["tests"]
             for case in t["alert_rule_test"] if case.get("exp_alerts")}
    assert fired == set(names), "alerts without a firing case: %s" % (set(names) - fired)
    for g in rules_groups():
        for r in g["rules"]:
            assert r["labels"]["severity"] in ("critical", "warning"), r["alert"]
            assert r["annotations"]["summary"] and r["annotations"]["description"], r["alert"]


def test_certificate_alert_only_on_a_real_expiry():
    (cert,) = [r for g in rules_groups() for r in g["rules"] if r["alert"] == "ZkwardenCertificateExpiresSoon"]
    assert "zkwarden_tls_cert_expiry_timestamp_seconds > 0" in cert["expr"]


def test_prometheusrule_holds_the_rules_file(promtool, tmp_path):
    need(promtool)
    doc = yaml.safe_load(open(OPERATOR_RULE))
    assert (doc["apiVersion"], doc["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert doc["metadata"]["name"] and doc["metadata"]["labels"]
    assert doc["spec"]["groups"] == rules_groups()
    extracted = tmp_path / "from-prometheusrule.yaml"
    extracted.write_text(yaml.safe_dump({"groups": doc["spec"]["groups"]}))
    run([promtool, "check", "rules", str(extracted)])


def test_dashboard_queries_are_valid_promql(promtool, tmp_path):
    need(promtool)
    dash = json.load(open(DASHBOARD))
    assert dash["uid"] and dash["title"] and dash["schemaVersion"] >= 30
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert variables == {"datasource", "instance"}
    for p in dash["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
            assert p["targets"], p["title"]
    text = json.dumps(dash)
    assert not re.search(r"https?://", text)  # no external links or assets
    exprs = dashboard_exprs()
    for e in exprs:
        assert 'instance=~"$instance"' in e, e
    rules = [{"record": "zkwarden:dashboard_query_%d" % i,
              "expr": e.replace("$instance", ".*").replace("$__rate_interval", "5m")}
             for i, e in enumerate(exprs)]
    f = tmp_path / "dashboard-queries.yaml"
    f.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    run([promtool, "check", "rules", str(f)])
    named = set(re.findall(r"\bzkwarden_[a-z0-9_]+", " ".join(exprs)))
    assert not set(DASHBOARD_MUST_SHOW) - named, set(DASHBOARD_MUST_SHOW) - named


def test_every_metric_named_exists_in_live_metrics(zk_server, zkwarden_factory, admin):
    proxy = zkwarden_factory.start(zk_server, extra_env={"ZKWARDEN_MODE": "sidecar"})
    body = admin(proxy).get("/metrics").text
    families = dict(re.findall(r"^# TYPE (\S+) (\S+)$", body, re.M))
    names = set(families)
    for fam, kind in families.items():
        if kind == "histogram":
            names |= {fam + "_bucket", fam + "_sum", fam + "_count"}
    named = set(re.findall(r"\bzkwarden_[a-z0-9_]+", " ".join(dashboard_exprs() + rule_exprs())))
    named.discard("zkwarden_")
    missing = sorted(n for n in named if n not in names and not n.startswith("zkwarden:"))
    assert not missing, "named in deploy/grafana or deploy/prometheus but not on a live /metrics: %s" % missing
