"""The alert rules that ship (deploy/kubernetes/monitoring/prometheus-rule.yaml): Prometheus's own
promtool checks them and runs each alert over made-up series (`promtool test rules`: it fires
when its condition holds long enough, and stays quiet otherwise), and every metric and label
value they name is one a live server exposes on /metrics (as the Grafana dashboard's are,
tests/telemetry/test_metrics.py)."""

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from app.launcher import metrics as launcher_metrics
from tests.support.api import Worker

RULE = Path(__file__).resolve().parents[1] / "deploy" / "kubernetes" / "monitoring" / "prometheus-rule.yaml"
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool (Debian's prometheus) is not installed")
CLAIM = 'route="/v1/dispatch/claim",method="POST",status="200"'


def groups() -> dict[str, Any]:
    """The PrometheusRule's spec: a Prometheus rule file as it stands."""
    return yaml.safe_load(RULE.read_text())["spec"]


def exprs() -> dict[str, str]:
    return {r["alert"]: r["expr"] for g in groups()["groups"] for r in g["rules"]}


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def firing(alert: str, series: dict[str, str], at: str, *, fires: bool, **labels: str) -> dict[str, Any]:
    """A unit test of promtool's: `series` (selector: values a minute apart) evaluated at `at`,
    and `alert` firing there with `labels` (its severity added) or not at all."""
    severity = next(r["labels"]["severity"] for g in groups()["groups"] for r in g["rules"] if r.get("alert") == alert)
    expected = [{"exp_labels": {**labels, "severity": severity}}] if fires else []
    return {"interval": "1m", "input_series": [{"series": s, "values": v} for s, v in series.items()],
            "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": expected}]}


CASES = {
    "the log store refuses appends": firing(
        "FencelineLogStoreErrors", {'fenceline_log_store_errors_total{namespace="fl",reason="enospc"}': "0x3 1x30"},
        "6m", fires=True, namespace="fl", reason="enospc"),
    "the log store refused one, 10 minutes ago": firing(
        "FencelineLogStoreErrors", {'fenceline_log_store_errors_total{namespace="fl",reason="enospc"}': "0x3 1x30"},
        "15m", fires=False),
    "9 % of answers are 503 for 10 minutes": firing(
        "FencelineServerErrors", {f'fenceline_http_requests_total{{namespace="fl",{CLAIM}}}': "0+100x30",
                                  'fenceline_http_requests_total{namespace="fl",route="/v1/dispatch/claim",'
                                  'method="POST",status="503"}': "0+10x30"},
        "16m", fires=True, namespace="fl"),
    "1 % of answers are 503": firing(
        "FencelineServerErrors", {f'fenceline_http_requests_total{{namespace="fl",{CLAIM}}}': "0+100x30",
                                  'fenceline_http_requests_total{namespace="fl",route="/v1/dispatch/claim",'
                                  'method="POST",status="503"}': "0+1x30"},
        "16m", fires=False),
    "the sweeps stopped 20 minutes ago": firing(
        "FencelineReaperStopped", {'fenceline_reaper_sweep_duration_seconds_count{namespace="fl",pod="a"}':
                                   "0+6x10 60x30", 'fenceline_reaper_sweep_duration_seconds_count{namespace="fl",'
                                   'pod="b"}': "0x40"},
        "30m", fires=True, namespace="fl"),
    "one replica of two sweeps": firing(
        "FencelineReaperStopped", {'fenceline_reaper_sweep_duration_seconds_count{namespace="fl",pod="a"}':
                                   "0+6x40", 'fenceline_reaper_sweep_duration_seconds_count{namespace="fl",'
                                   'pod="b"}': "0x40"},
        "30m", fires=False),
    "half the claims take over a second": firing(
        "FencelineClaimLatencyHigh", {
            f'fenceline_http_request_duration_seconds_bucket{{namespace="fl",{CLAIM},le="0.5"}}': "0+100x30",
            f'fenceline_http_request_duration_seconds_bucket{{namespace="fl",{CLAIM},le="1.0"}}': "0+100x30",
            f'fenceline_http_request_duration_seconds_bucket{{namespace="fl",{CLAIM},le="2.5"}}': "0+200x30",
            f'fenceline_http_request_duration_seconds_bucket{{namespace="fl",{CLAIM},le="+Inf"}}': "0+200x30"},
        "16m", fires=True, namespace="fl"),
    "every claim takes under half a second": firing(
        "FencelineClaimLatencyHigh", {
            f'fenceline_http_request_duration_seconds_bucket{{namespace="fl",{CLAIM},le="0.5"}}': "0+200x30",
            f'fenceline_http_request_duration_seconds_bucket{{namespace="fl",{CLAIM},le="+Inf"}}': "0+200x30"},
        "16m", fires=False),
    "a launcher's Pod ran beside an earlier attempt's": firing(
        "FencelineAttemptOverlap", {'fenceline_attempt_overlap_seconds_count{namespace="fl",pod="l"}': "0+5x10 51x20",
                                    'fenceline_attempt_overlap_seconds_bucket{namespace="fl",pod="l",le="0.0"}':
                                    "0+5x10 50x20"},
        "12m", fires=True, namespace="fl"),
    "every replacement waited for its predecessor": firing(
        "FencelineAttemptOverlap", {'fenceline_attempt_overlap_seconds_count{namespace="fl",pod="l"}': "0+5x30",
                                    'fenceline_attempt_overlap_seconds_bucket{namespace="fl",pod="l",le="0.0"}':
                                    "0+5x30"},
        "20m", fires=False),
    "no replica answers scrapes": firing(
        "FencelineServerDown", {'up{job="fenceline",namespace="fl",pod="a"}': "1x5 0x30"}, "16m", fires=True),
    "one replica of two answers": firing(
        "FencelineServerDown", {'up{job="fenceline",namespace="fl",pod="a"}': "1x5 0x30",
                                'up{job="fenceline",namespace="fl",pod="b"}': "1x35"}, "16m", fires=False),
}


@needs_promtool
def test_promtool_finds_the_rules_sound(tmp_path):
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(groups()))
    done = promtool("check", "rules", "rules.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(exprs())} rules found" in done.stdout


@needs_promtool
@pytest.mark.parametrize("case", CASES)
def test_each_alert_fires_when_its_condition_holds_and_only_then(tmp_path, case):
    # Without their annotations, which promtool would compare too (their templates are checked
    # by `promtool check rules` above).
    bare = groups()
    for rule in (r for g in bare["groups"] for r in g["rules"]):
        rule.pop("annotations", None)
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(bare))
    tests = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [CASES[case]]}
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(tests))
    done = promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_is_tested_firing_and_quiet():
    tested = [(c["alert_rule_test"][0]["alertname"], bool(c["alert_rule_test"][0]["exp_alerts"]))
              for c in CASES.values()]
    assert sorted(tested) == sorted((alert, fires) for alert in exprs() for fires in (True, False))


def test_every_metric_and_label_value_the_alerts_name_is_exposed(operator):
    Worker(operator).claim()  # a claim answered, so its route's series exist
    # The server's /metrics, and a launcher's own (fenceline_attempt_overlap_seconds).
    text = operator.get("/metrics").text + generate_latest(launcher_metrics.REGISTRY).decode()
    exposed = {f.name: f.samples for f in text_string_to_metric_families(text)}
    for alert, expr in exprs().items():
        for name in re.findall(r"\bfenceline_\w+", expr):
            family = re.sub(r"_(total|bucket|count|sum)$", "", name)
            assert family in exposed, f"{alert}: {name}"
            assert any(s.name == name for s in exposed[family]), f"{alert}: {name}"
            for label, value in re.findall(rf'{name}\{{[^}}]*?(\w+)="([^"]*)"', expr):
                assert any(s.labels.get(label) == value for s in exposed[family]), f"{alert}: {label}={value}"
        # `up` is Prometheus's own series; the job is the Service's name (the ServiceMonitor's default)
        assert set(re.findall(r"\b(\w+)\{", expr)) - {"up"} <= set(re.findall(r"\bfenceline_\w+", expr)), alert
