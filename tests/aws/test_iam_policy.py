"""iam/aws-controller-policy.json allows every AWS call karpy's AWS provider makes (kept in step with the code)."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICES = {"ec2": "ec2", "ssm": "ssm", "iam": "iam", "eks": "eks", "sqs": "sqs", "pricing": "pricing"}


def _pascal(snake: str) -> str:
    return "".join(p.capitalize() for p in snake.split("_"))


def test_the_policy_allows_every_call_the_code_makes():
    allowed = {a for s in json.loads((ROOT / "iam" / "aws-controller-policy.json").read_text())["Statement"]
               for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    used = set()
    for f in (ROOT / "karpy" / "cloudprovider" / "ec2").glob("*.py"):
        text = f.read_text()
        for svc, method in re.findall(r"\b(?:c|clients)\.(ec2|ssm|iam|eks|sqs|pricing)\.(?!meta\b|get_paginator\b)(\w+)\(", text):
            used.add(f"{SERVICES[svc]}:{_pascal(method)}")
        for svc, method in re.findall(r"\b(?:c|clients)\.(ec2|pricing|iam)\.get_paginator\(\"(\w+)\"\)", text):
            used.add(f"{svc}:{_pascal(method)}")
    assert len(used) > 15
    assert sorted(used - allowed) == []


def test_calls_on_existing_resources_are_not_scoped_by_request_tags():
    """Deleting a profile or tagging a running instance sends no tags: a RequestTag condition would deny it."""
    statements = json.loads((ROOT / "iam" / "aws-controller-policy.json").read_text())["Statement"]

    def allowed_without_request_tag(action: str) -> bool:
        for s in statements:
            actions = [s["Action"]] if isinstance(s["Action"], str) else s["Action"]
            conds = json.dumps(s.get("Condition") or {})
            if action in actions and "aws:RequestTag" not in conds:
                return True
        return False

    for action in ("iam:DeleteInstanceProfile", "iam:RemoveRoleFromInstanceProfile", "iam:AddRoleToInstanceProfile",
                   "ec2:CreateTags", "ec2:DeleteLaunchTemplate", "ec2:TerminateInstances"):
        assert allowed_without_request_tag(action), action
