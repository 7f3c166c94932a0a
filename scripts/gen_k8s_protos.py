#!/usr/bin/env python3
"""Compile Kubernetes' protobuf schemas into the descriptors `karpy sandbox` decodes request bodies with.

    pip install -e '.[protos]'                  # grpcio-tools: protoc as a Python module, for this script only
    python scripts/gen_k8s_protos.py            # (re)write karpy/sandbox/protos/
    python scripts/gen_k8s_protos.py --check    # exit 1 if karpy/sandbox/protos/ is out of date

kubectl sends the built-in kinds as ``application/vnd.kubernetes.protobuf``. The
message schemas are Kubernetes' own ``generated.proto`` files from the Go modules
k8s.io/api, k8s.io/apimachinery and k8s.io/apiextensions-apiserver at
``VERSION`` (read from the Go module cache; ``cd scripts/kube/kubernetes && go mod
download k8s.io/api k8s.io/apimachinery k8s.io/apiextensions-apiserver`` fills
it). Two files are written:

* ``kubernetes-<VERSION>.binpb``: one serialized ``FileDescriptorSet`` (protoc
  ``--include_imports``, without source info) of the API groups the sandbox
  serves and the apimachinery packages they import.
* ``kubernetes-<VERSION>.gojson.json``: what the ``.proto`` files do not say
  but Kubernetes' JSON depends on, read from the Go struct tags of the same
  modules: per message, the fields that are Go pointers (present on the wire
  means set, even when empty), the scalars without ``omitempty`` (a zero value
  is written), the embedded structs that JSON inlines (``volumeSource``,
  ``localObjectReference``...) and the JSON names that differ from the proto
  names (``$ref``, ``x-kubernetes-*``, ``apiGroup``).

:mod:`karpy.sandbox.protobuf` loads both at run time with Google's ``protobuf``
package.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "karpy" / "sandbox" / "protos"
VERSION = "v0.33.13"

# (Go module, package directory inside it): the groups the sandbox serves, plus what they import
API_PACKAGES = [
    ("k8s.io/api", "core/v1"), ("k8s.io/api", "apps/v1"), ("k8s.io/api", "batch/v1"), ("k8s.io/api", "policy/v1"),
    ("k8s.io/api", "rbac/v1"), ("k8s.io/api", "coordination/v1"), ("k8s.io/api", "scheduling/v1"),
    ("k8s.io/api", "storage/v1"), ("k8s.io/api", "networking/v1"), ("k8s.io/api", "discovery/v1"),
    ("k8s.io/api", "events/v1"), ("k8s.io/api", "autoscaling/v1"), ("k8s.io/api", "autoscaling/v2"),
    ("k8s.io/api", "node/v1"), ("k8s.io/api", "authorization/v1"), ("k8s.io/api", "authentication/v1"),
    ("k8s.io/apiextensions-apiserver", "pkg/apis/apiextensions/v1"),
    ("k8s.io/apimachinery", "pkg/apis/meta/v1"), ("k8s.io/apimachinery", "pkg/runtime"),
    ("k8s.io/apimachinery", "pkg/runtime/schema"), ("k8s.io/apimachinery", "pkg/util/intstr"),
    ("k8s.io/apimachinery", "pkg/api/resource"),
]
MODULES = sorted({m for m, _ in API_PACKAGES})


def module_cache() -> Path:
    env = os.environ.get("GOMODCACHE")
    if env:
        return Path(env)
    gopath = os.environ.get("GOPATH") or str(Path.home() / "go")
    return Path(gopath.split(os.pathsep)[0]) / "pkg" / "mod"


def module_dir(cache: Path, module: str) -> Path:
    d = cache / f"{module}@{VERSION}"
    if not d.is_dir():
        sys.exit(f"gen_k8s_protos: {d} is missing: run `cd scripts/kube/kubernetes && go mod download {module}` "
                 f"(the version is {VERSION})")
    return d


# --- the descriptor set --------------------------------------------------------------------------
def compile_descriptors(cache: Path) -> bytes:
    try:
        from grpc_tools import protoc
    except ImportError:
        sys.exit("gen_k8s_protos: needs grpcio-tools (pip install grpcio-tools==1.85.1)")
    with tempfile.TemporaryDirectory() as tmp:
        # an include root laid out as the imports spell the paths: k8s.io/<module path>/...
        root = Path(tmp) / "include"
        for module in MODULES:
            link = root / module
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(module_dir(cache, module), target_is_directory=True)
        out = Path(tmp) / "set.binpb"
        files = [f"{m}/{p}/generated.proto" for m, p in API_PACKAGES]
        # protoc warns about every unused import in Kubernetes' files: keep its stderr for a failure
        log = Path(tmp) / "protoc.log"
        saved = os.dup(2)
        with open(log, "wb") as fh:
            os.dup2(fh.fileno(), 2)
            try:
                rc = protoc.main(["protoc", f"-I{root}", "--include_imports", f"--descriptor_set_out={out}", *files])
            finally:
                os.dup2(saved, 2)
                os.close(saved)
        if rc != 0:
            sys.stderr.write(log.read_text())
            sys.exit(f"gen_k8s_protos: protoc failed ({rc})")
        data = out.read_bytes()
    # protoc lists every file after the files it imports, the order a descriptor pool adds them in
    return data


# --- the Go struct tags --------------------------------------------------------------------------
_STRUCT = re.compile(r"^type (\w+) struct \{\s*$")
_FIELD = re.compile(r"^\s*(?:(\w+)\s+)?(\*?)([^\s`]+)\s+`([^`]*)`")
_TAG = re.compile(r'(\w+):"([^"]*)"')


def go_struct_tags(pkg_dir: Path) -> dict[str, dict[int, dict]]:
    """struct name -> protobuf field number -> {json, omitempty, inline, pointer, go_type}."""
    out: dict[str, dict[int, dict]] = {}
    for path in sorted(pkg_dir.glob("*.go")):
        if path.name.endswith("_test.go") or path.name.startswith("zz_generated") or path.name.endswith(".pb.go"):
            continue
        struct = None
        for line in path.read_text().splitlines():
            if struct is None:
                m = _STRUCT.match(line)
                if m:
                    struct = m.group(1)
                continue
            if line.startswith("}"):
                struct = None
                continue
            m = _FIELD.match(line)
            if not m:
                continue
            name, ptr, gotype, tag = m.groups()
            tags = dict(_TAG.findall(tag))
            pb = tags.get("protobuf")
            if not pb:
                continue
            bits = pb.split(",")
            if len(bits) < 2 or not bits[1].isdigit():
                continue
            jbits = tags.get("json", "").split(",")
            out.setdefault(struct, {})[int(bits[1])] = {
                "json": jbits[0], "omitempty": "omitempty" in jbits[1:], "inline": "inline" in jbits[1:],
                "pointer": bool(ptr), "go_type": gotype, "embedded": name is None,
            }
    return out


def go_json_hints(cache: Path, descriptor_set: bytes) -> dict:
    """Per proto message: p = pointer fields, k = zero scalars JSON writes, i = inlined fields, n = JSON names."""
    from google.protobuf import descriptor_pb2

    fds = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set)
    tags_by_package: dict[str, dict[str, dict[int, dict]]] = {}
    for module, pkg in API_PACKAGES:
        go_package = f"{module}/{pkg}"
        tags_by_package[go_package] = go_struct_tags(module_dir(cache, module) / pkg)
    hints: dict[str, dict] = {}
    missing = []
    for f in fds.file:
        tags = tags_by_package.get(f.options.go_package)
        if tags is None:
            continue
        for msg in f.message_type:
            full = f"{f.package}.{msg.name}"
            st = tags.get(msg.name)
            if st is None:
                missing.append(full)
                continue
            h: dict[str, list | dict] = {}
            for fld in msg.field:
                t = st.get(fld.number)
                if t is None:
                    missing.append(f"{full}.{fld.name}")
                    continue
                scalar = fld.type != descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
                repeated = fld.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
                if t["inline"] or (t["embedded"] and t["json"] == ""):
                    h.setdefault("i", []).append(fld.number)
                    continue
                if t["json"] not in ("", "-") and t["json"] != fld.name:
                    h.setdefault("n", {})[str(fld.number)] = t["json"]
                if t["pointer"] and not repeated:
                    h.setdefault("p", []).append(fld.number)
                elif scalar and not repeated and not t["omitempty"]:
                    h.setdefault("k", []).append(fld.number)
            for k in ("p", "k", "i"):
                if k in h:
                    h[k] = sorted(h[k])
            if h:
                hints[full] = h
    if missing:
        # Time, MicroTime, Quantity... marshal themselves (karpy.sandbox.protobuf knows them); the rest are not objects
        print("gen_k8s_protos: no Go struct tags (custom JSON, or not an object) for " + ", ".join(missing),
              file=sys.stderr)
    return {"version": VERSION, "messages": dict(sorted(hints.items()))}


README = """\
# Kubernetes protobuf descriptors

Generated by `python scripts/gen_k8s_protos.py` (protoc from grpcio-tools) from the
`generated.proto` files and Go struct tags of the Go modules k8s.io/api,
k8s.io/apimachinery and k8s.io/apiextensions-apiserver at {version}. Do not edit:
rerun the script.

- `kubernetes-{version}.binpb`: a serialized `FileDescriptorSet` of {packages}.
- `kubernetes-{version}.gojson.json`: per message, the Go facts Kubernetes' JSON
  follows (pointer fields, scalars without `omitempty`, inlined structs, JSON names).

`karpy/sandbox/protobuf.py` decodes `application/vnd.kubernetes.protobuf` request
bodies with them.
"""


def outputs(cache: Path) -> dict[str, bytes]:
    fds = compile_descriptors(cache)
    hints = go_json_hints(cache, fds)
    pkgs = ", ".join(f"{m}/{p}" for m, p in API_PACKAGES)
    return {
        f"kubernetes-{VERSION}.binpb": fds,
        f"kubernetes-{VERSION}.gojson.json": (json.dumps(hints, indent=0, sort_keys=True) + "\n").encode(),
        "README.md": README.format(version=VERSION, packages=pkgs).encode(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="report differences instead of writing")
    ap.add_argument("--out", type=Path, default=OUT, help="the directory to write")
    args = ap.parse_args(argv)
    want = outputs(module_cache())
    out: Path = args.out
    stale = sorted(n for n, data in want.items() if not (out / n).is_file() or (out / n).read_bytes() != data)
    extra = sorted(p.name for p in out.glob("*") if p.name not in want) if out.is_dir() else []
    if args.check:
        for n in stale:
            print(f"{out / n}: out of date", file=sys.stderr)
        for n in extra:
            print(f"{out / n}: not generated", file=sys.stderr)
        return 1 if stale or extra else 0
    out.mkdir(parents=True, exist_ok=True)
    for n in stale:
        (out / n).write_bytes(want[n])
        print(f"wrote {out / n} ({len(want[n])} bytes)")
    for n in extra:
        (out / n).unlink()
        print(f"removed {out / n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
