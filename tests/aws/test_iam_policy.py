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
