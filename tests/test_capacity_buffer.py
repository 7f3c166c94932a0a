"""CapacityBuffer (autoscaling.x-k8s.io, upstream's CapacityBuffer feature gate) is not simulated yet:
`karpy simulate` refuses it by name rather than skip it as another project's resource, since a buffer
changes which nodes Karpenter launches."""

from __future__ import annotations

from click.testing import CliRunner

from karpy.cli import main

BUFFER = """apiVersion: autoscaling.x-k8s.io/v1beta1
kind: CapacityBuffer
metadata: {name: headroom, namespace: default}
spec: {replicas: 2, podTemplateRef: {name: web}}
"""


def test_a_capacity_buffer_is_refused_with_a_message_naming_it(tmp_path):
    f = tmp_path / "buffer.yaml"
    f.write_text(BUFFER)
    r = CliRunner().invoke(main, ["simulate", str(f)])
    assert r.exit_code == 2
    assert "document 0 (CapacityBuffer/headroom): kind:" in r.output
    assert "does not simulate yet" in r.output and "Traceback" not in r.output
