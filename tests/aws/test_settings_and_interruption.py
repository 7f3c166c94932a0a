"""AWS settings (flags over variables, exit 2 without a traceback) and interruption message parsing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from karpy.cloudprovider.ec2.controllers import parse_message
from karpy.controller.settings import SettingsError, resolve


def test_aws_settings_from_flags_and_variables():
    s = resolve({"cloud_provider": "aws", "cluster_name": "demo", "reserved_enis": "2"},
                {"RESERVED_ENIS": "5", "VM_MEMORY_OVERHEAD_PERCENT": "0.05", "INTERRUPTION_QUEUE": "demo",
                 "ISOLATED_VPC": "true", "CLUSTER_ENDPOINT": "https://x.eks.amazonaws.com"})
    a = s.aws
    assert (a.reserved_enis, a.vm_memory_overhead_percent, a.interruption_queue, a.isolated_vpc, a.cluster_endpoint) == \
        (2, 0.05, "demo", True, "https://x.eks.amazonaws.com")
    for flags, env, msg in (({}, {}, "CLUSTER_NAME"), ({"cluster_name": "x"}, {"VM_MEMORY_OVERHEAD_PERCENT": "7.5"}, "VM_MEMORY_OVERHEAD_PERCENT"),
                            ({"cluster_name": "x", "cluster_endpoint": "eks"}, {}, "--cluster-endpoint")):
        with pytest.raises(SettingsError, match=msg):
            resolve({"cloud_provider": "aws", **flags}, env)


def test_controller_without_region_exits_2_naming_it(tmp_path):
    kc = tmp_path / "kc"
    kc.write_text(json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "c",
                              "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
                              "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                              "users": [{"name": "u", "user": {}}]}))
    env = {"PATH": "/usr/bin:/bin", "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": "/dev/null",
           "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"}
    r = subprocess.run([sys.executable, "-m", "karpy.cli", "controller", "--cloud-provider", "aws", "--cluster-name", "demo",
                        "--kubeconfig", str(kc), "--metrics-port", "0", "--health-probe-port", "0"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2 and "no AWS region" in r.stderr and "Traceback" not in r.stderr


def envelope(source, dtype, detail):
    return json.dumps({"version": "0", "id": "1", "detail-type": dtype, "source": source, "account": "1",
                       "time": "2026-01-01T00:00:00Z", "region": "us-west-2", "resources": [], "detail": detail})


def test_interruption_messages_parse_as_upstream():
    assert parse_message(envelope("aws.ec2", "EC2 Spot Instance Interruption Warning",
                                  {"instance-id": "i-1", "instance-action": "terminate"}))[:2] == ("spot_interrupted", ["i-1"])
    assert parse_message(envelope("aws.ec2", "EC2 Instance Rebalance Recommendation", {"instance-id": "i-1"}))[0] == \
        "rebalance_recommendation"
    assert parse_message(envelope("aws.ec2", "EC2 Instance State-change Notification",
                                  {"instance-id": "i-2", "state": "stopping"}))[:2] == ("instance_stopped", ["i-2"])
    assert parse_message(envelope("aws.ec2", "EC2 Instance State-change Notification",
                                  {"instance-id": "i-2", "state": "running"})) is None
    health = {"service": "EC2", "eventTypeCategory": "scheduledChange", "affectedEntities": [{"entityValue": "i-3"}, {"entityValue": "i-4"}]}
    assert parse_message(envelope("aws.health", "AWS Health Event", health))[:2] == ("scheduled_change", ["i-3", "i-4"])
    assert parse_message(envelope("aws.health", "AWS Health Event", {**health, "service": "RDS"})) is None
    assert parse_message("not json") is None and parse_message(json.dumps({"version": "1"})) is None
