"""The container image: the Dockerfile linted for what matters to a user (a pinned base image, two stages, a
non-root user matching the Deployment's, pinned Python packages, no remote ADD, exec-form entry point) and its
RUN steps run as commands where they can be (no container engine here): the build stage stamps the commit and
builds karpy's wheel, the runtime stage installs it against constraints.txt into a fresh virtual environment,
whose `karpy --version` names the commit."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .test_manifests import container

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Instruction:
    word: str
    flags: dict[str, list[str]]  # --from=build, --mount=... (a flag may repeat)
    args: str


@dataclass
class Stage:
    image: str
    name: str | None
    steps: list[Instruction] = field(default_factory=list)

    def all(self, word: str) -> list[Instruction]:
        return [i for i in self.steps if i.word == word]


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """The Dockerfile's global ARG defaults and its stages (base images with those ARGs substituted)."""
    lines, buf = [], ""
    for raw in text.splitlines():
        s = raw.strip()
        if not s or s.startswith("#"):
            continue
        if s.endswith("\\"):
            buf += s[:-1] + " "
            continue
        lines.append(buf + s)
        buf = ""
    assert not buf, "the Dockerfile ends in a line continuation"
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in lines:
        word, _, rest = line.partition(" ")
        word, rest = word.upper(), rest.strip()
        flags: dict[str, list[str]] = {}
        while rest.startswith("--"):
            flag, _, rest = rest.partition(" ")
            k, _, v = flag[2:].partition("=")
            flags.setdefault(k, []).append(v)
            rest = rest.strip()
        if word == "FROM":
            image, *alias = rest.split()
            image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], image)
            stages.append(Stage(image, alias[1] if alias and alias[0].upper() == "AS" else None))
        elif word == "ARG" and not stages:
            k, _, v = rest.partition("=")
            args[k] = v.strip('"')
        else:
            assert stages, f"{word} before any FROM"
            stages[-1].steps.append(Instruction(word, flags, rest))
    return args, stages


def dockerfile() -> tuple[dict[str, str], list[Stage]]:
    return parse((ROOT / "Dockerfile").read_text())


def dockerignored() -> list[str]:
    return [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
            if line.strip() and not line.startswith("#")]


# --- lint ---------------------------------------------------------------------------------------------------


def pinned(image: str) -> bool:
    """A base image pinned by digest, or by a full version tag (python:3.12.11-slim-bookworm, not 3.12-slim)."""
    if re.search(r"@sha256:[0-9a-f]{64}$", image):
        return True
    _, _, tag = image.rpartition(":")
    return bool(re.match(r"\d+\.\d+\.\d+(-[a-z0-9.-]+)?$", tag))


@pytest.mark.parametrize("image, ok", [
    ("python:3.12.11-slim-bookworm", True), ("python:3.12-slim@sha256:" + "a" * 64, True),
    ("python:3.12-slim", False), ("python:latest", False), ("python", False), ("python:3", False),
])
def test_a_base_image_is_pinned_by_digest_or_full_version(image, ok):
    assert pinned(image) is ok


def test_two_stages_on_a_pinned_base_the_runtime_one_non_root():
    _, stages = dockerfile()
    assert len(stages) == 2 and stages[0].name == "build"
    for s in stages:
        assert pinned(s.image), f"base image {s.image} is not pinned"
    build, runtime = stages
    # the runtime stage takes nothing of the build stage but its wheel, through a bind mount (no layer of it)
    assert not [c for c in runtime.all("COPY") if c.flags.get("from")]
    assert any("type=bind,from=build,source=/wheels,target=/wheels" in m
               for r in runtime.all("RUN") for m in r.flags.get("mount", ()))
    # the last USER is numeric, not root, and is the Deployment's runAsUser:runAsGroup
    user = runtime.all("USER")[-1].args
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and gid.isdigit() and int(uid) != 0 and int(gid) != 0
    sc = container()["securityContext"]
    assert user == f"{sc['runAsUser']}:{sc['runAsGroup']}"
    # and nothing after it needs root
    last_user = max(i for i, s in enumerate(runtime.steps) if s.word == "USER")
    assert not [s for s in runtime.steps[last_user:] if s.word in ("RUN", "COPY", "ADD")]


def test_no_remote_add_and_copies_stay_root_owned():
    """No ADD (a URL fetched unpinned, or an archive unpacked unseen); COPY gives no file to the runtime user,
    so the controller cannot rewrite its own program."""
    _, stages = dockerfile()
    for s in stages:
        assert not s.all("ADD")
        for c in s.all("COPY"):
            assert "chown" not in c.flags and "chmod" not in c.flags, c


def test_every_python_package_is_pinned():
    """pip only installs with constraints.txt (or one wheel with --no-deps), binary wheels only at run time;
    constraints.txt is what scripts/gen_constraints.py writes from pyproject.toml's pins."""
    _, stages = dockerfile()
    pips = [r.args for s in stages for r in s.all("RUN") if re.search(r"\bpip (install|wheel|download)\b", r.args)]
    assert pips
    for cmd in pips:
        assert "--constraint" in cmd or "--no-deps" in cmd, cmd
        assert "--upgrade" not in cmd and " -U " not in cmd, cmd
    runtime_pip = [r.args for r in stages[-1].all("RUN") if "pip install" in r.args]
    assert runtime_pip and all("--only-binary=:all:" in c for c in runtime_pip)
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_constraints.py"), "--check"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines()
                if line and not line.startswith("#"))
    for name in ("pyyaml", "click", "lightkube", "numpy", "boto3", "botocore", "setuptools"):
        assert name in pins, name


def test_entry_point_runs_karpy_controller_on_the_deployments_ports():
    _, stages = dockerfile()
    runtime = stages[-1]
    assert json.loads(runtime.all("ENTRYPOINT")[-1].args) == ["karpy"]  # exec form: SIGTERM reaches karpy
    assert json.loads(runtime.all("CMD")[-1].args) == ["controller"]
    assert set(runtime.all("EXPOSE")[-1].args.split()) == {"8080", "8081"}
    assert {p["containerPort"] for p in container()["ports"]} == {8080, 8081}


def test_copies_only_what_exists_and_is_not_ignored():
    ignored = dockerignored()
    for s in dockerfile()[1]:
        for c in s.all("COPY"):
            *sources, _dest = c.args.split()
            for src in sources:
                assert (ROOT / src).exists(), src
                assert src.rstrip("/") not in ignored, f"{src} is in .dockerignore"
        for r in s.all("RUN"):
            for m in r.flags.get("mount", ()):
                opts = dict(o.partition("=")[::2] for o in m.split(","))
                if "from" not in opts and "source" in opts:  # a file of the build context
                    assert (ROOT / opts["source"]).exists() and opts["source"] not in ignored, m


# --- the RUN steps, as commands ---------------------------------------------------------------------------


def _site_packages(python: Path) -> Path:
    return Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())


def _venv(d: Path, deps: Path) -> Path:
    """A fresh virtual environment seeing the project's installed packages (pinned as pyproject.toml says) but
    not karpy itself, so that pip resolves the Dockerfile's constraints without a network and installs only
    karpy; `pip` on its PATH is its own."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(d)], check=True)
    (_site_packages(d / "bin" / "python") / "project-deps.pth").write_text(f"{deps}\n")
    pip = d / "bin" / "pip"
    pip.write_text(f'#!/bin/sh\nexec "{d}/bin/python" -m pip "$@"\n')
    pip.chmod(0o755)
    return d


def _deps_dir(d: Path) -> Path:
    """The project venv's packages, karpy's own entries left out (links, nothing copied or changed)."""
    d.mkdir()
    for p in _site_packages(Path(sys.executable)).iterdir():
        if "karpy" in p.name.lower() or p.suffix == ".pth":
            continue
        (d / p.name).symlink_to(p)
    return d


def _run(cmd: str, cwd: Path, venv: Path, env: dict, paths: dict[str, Path]) -> subprocess.CompletedProcess:
    for inside, outside in sorted(paths.items(), key=lambda kv: -len(kv[0])):
        cmd = cmd.replace(inside, str(outside))
    return subprocess.run(["/bin/sh", "-ec", cmd], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**env, "PATH": f"{venv}/bin:{os.environ['PATH']}", "VIRTUAL_ENV": str(venv),
                               "PIP_NO_INDEX": "1", "PYTHONNOUSERSITE": "1"})


def test_run_steps_build_the_wheel_and_install_it_with_karpy_version_naming_the_commit(tmp_path):
    if not shutil.which("sh"):
        pytest.skip("no /bin/sh to run the Dockerfile's steps with")
    args, (build, runtime) = dockerfile()
    deps = _deps_dir(tmp_path / "deps")
    # the build stage: its context (COPY), its ARG and ENV, its RUN steps in its WORKDIR
    src = tmp_path / "src"
    src.mkdir()
    for c in build.all("COPY"):
        *sources, dest = c.args.split()
        for s in sources:
            target = src / dest.rstrip("/").removeprefix("./") if dest not in ("./", ".") else src / s
            (shutil.copytree if (ROOT / s).is_dir() else shutil.copy)(
                ROOT / s, target, **({"ignore": shutil.ignore_patterns("__pycache__")} if (ROOT / s).is_dir() else {}))
    assert [w.args for w in build.all("WORKDIR")] == ["/src"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    for e in build.all("ENV"):
        env.update(dict(kv.split("=", 1) for kv in shlex.split(e.args)))
    (arg,) = build.all("ARG")
    assert arg.args.partition("=")[0] == "KARPY_COMMIT"
    env["KARPY_COMMIT"] = "abc1234"
    wheels = tmp_path / "wheels"
    bvenv = _venv(tmp_path / "build-venv", deps)
    for r in build.all("RUN"):
        p = _run(r.args, src, bvenv, env, {"/wheels": wheels})
        assert p.returncode == 0, f"RUN {r.args}\n{p.stdout}\n{p.stderr}"
    assert (src / "karpy" / "_build.py").read_text() == "COMMIT = 'abc1234'\n"
    (wheel,) = wheels.glob("karpy-*.whl")
    # the runtime stage: its pip step with the mounts in place, into another fresh environment
    rvenv = _venv(tmp_path / "runtime-venv", deps)
    ran, skipped = [], []
    for r in runtime.all("RUN"):
        if "pip install" not in r.args:
            skipped.append(r.args)  # groupadd/useradd: root's business in the image, nothing to learn here
            continue
        mounts = {}
        for m in r.flags.get("mount", ()):
            opts = dict(o.partition("=")[::2] for o in m.split(","))
            mounts[opts["target"]] = wheels if opts.get("from") == "build" else ROOT / opts["source"]
        p = _run(r.args, tmp_path, rvenv, {**env, "KARPY_COMMIT": ""}, mounts)
        assert p.returncode == 0, f"RUN {r.args}\n{p.stdout}\n{p.stderr}"
        ran.append(r.args)
    assert len(ran) == 1 and len(skipped) == 1 and "useradd" in skipped[0]
    karpy = rvenv / "bin" / "karpy"
    v = subprocess.run([str(karpy), "--version"], capture_output=True, text=True, cwd=tmp_path)
    assert v.returncode == 0 and v.stdout == "karpy 0.1.0 (commit abc1234)\n", v.stderr
    # the installed karpy is the wheel's (not the source tree's), with its catalogs: it simulates an example
    where = subprocess.run([str(rvenv / "bin" / "python"), "-c", "import karpy; print(karpy.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path).stdout
    assert where.startswith(str(rvenv)), where
    s = subprocess.run([str(karpy), "simulate", "-q", "-o", "json", str(ROOT / "examples" / "eks-graviton")],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert s.returncode == 0, s.stderr[-2000:]
    assert [i["kind"] for i in json.loads(s.stdout)["items"]].count("NodeClaim") == 2
    assert wheel.name == "karpy-0.1.0-py3-none-any.whl"


def test_a_source_checkout_shows_the_bare_version():
    p = subprocess.run([sys.executable, "-m", "karpy.cli", "--version"], capture_output=True, text=True)
    assert p.stdout == "karpy 0.1.0\n"
