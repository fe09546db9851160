"""The image workflow, .github/workflows/images.yml: clean under actionlint, and in
step with the files it publishes for.

GitHub Actions cannot run here, so the workflow is checked as far as it can be
without a runner: ``actionlint`` (the test extra installs it; missing is a failure,
not a skip) for syntax, expressions, action inputs and permissions; then the parsed
YAML. Its one shell step (release tag -> version, image name, licence) is run with
bash as the runner would, with the variables GitHub sets, and the ``${{ ... }}``
expressions of the build steps are filled in from a small context (an unknown
expression fails). What comes out is compared with what the manifests, the chart and
pyproject.toml name: the pushed repositories are exactly the kustomize base's and the
chart's images, and a tag ``v<appVersion>`` publishes the tag they pull.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import tomllib
import yaml

from tests.ops.k8s import CHART, MANIFESTS, ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "images.yml"
PLATFORMS = {"linux/amd64", "linux/arm64"}
ACTIONS = {
    "actions/checkout",
    "docker/setup-qemu-action",
    "docker/setup-buildx-action",
    "docker/login-action",
    "docker/build-push-action",
}
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
SHA = "0123456789abcdef0123456789abcdef01234567"


def _workflow() -> dict[str, Any]:
    return yaml.safe_load(WORKFLOW.read_text())


def _on(workflow: dict[str, Any]) -> dict[str, Any]:
    # YAML 1.1 reads the bare key `on` as the boolean true
    return workflow.get("on", workflow.get(True))


def _uses(step: dict[str, Any]) -> str:
    return step.get("uses", "").split("@")[0]


def _steps(job: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [s for s in job["steps"] if _uses(s) == action]


def _build_jobs() -> dict[str, dict[str, Any]]:
    jobs = _workflow()["jobs"]
    return {name: job for name, job in jobs.items() if _steps(job, "docker/build-push-action")}


def _matrix(job: dict[str, Any]) -> list[dict[str, str]]:
    matrix = job["strategy"]["matrix"]
    assert set(matrix) == {"include"}, "one explicit entry per image"
    return matrix["include"]


def _publish() -> dict[str, Any]:
    (job,) = [j for j in _build_jobs().values() if _steps(j, "docker/login-action")]
    return job


def _fill(text: str, context: dict[str, Any]) -> str:
    """Replace each ``${{ a.b.c }}`` with its value in CONTEXT (KeyError if unknown)."""

    def value(match: re.Match[str]) -> str:
        node: Any = context
        for part in match.group(1).split("."):
            node = node[part]
        return str(node)

    return EXPRESSION.sub(value, text)


def _project() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _chart() -> dict[str, Any]:
    return yaml.safe_load((CHART / "Chart.yaml").read_text())


def _github_repository() -> str:
    """owner/name of the project's own repository, from the chart's sources."""
    (source,) = _chart()["sources"]
    match = re.fullmatch(r"https://github\.com/([\w.-]+/[\w.-]+)", source)
    assert match, source
    return match.group(1)


def _run_meta(tag: str, image: str, owner: str, output: Path) -> dict[str, str] | None:
    """The publish job's `meta` step as the runner runs it (`shell: bash`) for a push
    of TAG by OWNER: its outputs (GITHUB_OUTPUT), or None if it failed."""
    step = next(s for s in _publish()["steps"] if s.get("id") == "meta")
    assert _workflow()["defaults"]["run"]["shell"] == "bash"
    env = {
        name: _fill(str(value), {"matrix": {"image": image}})
        for name, value in step.get("env", {}).items()
    }
    output.write_text("")
    proc = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
        cwd=ROOT,
        env={
            "PATH": os.environ["PATH"],
            "GITHUB_REF_NAME": tag,
            "GITHUB_REPOSITORY_OWNER": owner,
            "GITHUB_OUTPUT": str(output),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0:
        assert "::error::not a release tag" in proc.stdout, proc.stdout + proc.stderr
        return None
    assert not proc.stderr, proc.stderr
    return dict(line.split("=", 1) for line in output.read_text().splitlines())


@pytest.fixture
def meta(tmp_path: Path):
    """``meta(tag, image=..., owner=...)``: run the `meta` step, see _run_meta."""
    runs = itertools.count()

    def run(tag: str, image: str = "gpu-eta-exporter", owner: str = "gpu-eta"):
        return _run_meta(tag, image, owner, tmp_path / f"github-output-{next(runs)}")

    return run


def _actionlint() -> str:
    scripts = sysconfig.get_path("scripts")
    found = shutil.which("actionlint", path=scripts) or shutil.which("actionlint")
    if not found:
        pytest.fail(
            "actionlint is not installed: it comes with the test extra of pyproject.toml "
            "(./test.sh installs it through scripts/bootstrap.sh)"
        )
    return found


def _lint(path: Path) -> subprocess.CompletedProcess[str]:
    # shellcheck and pyflakes switched off: results must not depend on what else
    # happens to be on PATH
    return subprocess.run(
        [_actionlint(), "-no-color", "-oneline", "-shellcheck=", "-pyflakes=", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=path.parents[2],
    )


def _lint_text(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / ".github" / "workflows" / WORKFLOW.name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return _lint(path)


def _majors(text: str) -> str:
    """Each action pinned by its major tag only (`@v4.6.0` -> `@v4`)."""
    return re.sub(r"(uses: [\w./-]+)@(v\d+)\.\d+\.\d+\b", r"\1@\2", text)


def test_actionlint_is_clean(tmp_path: Path) -> None:
    proc = _lint(WORKFLOW)
    assert (proc.returncode, proc.stdout + proc.stderr) == (0, "")
    # actionlint checks a popular action's inputs against its table only for a
    # major tag (`@v4`), not a full release tag: once more with pins cut to majors
    majors = _majors(WORKFLOW.read_text())
    assert majors != WORKFLOW.read_text()
    proc = _lint_text(tmp_path, majors)
    assert (proc.returncode, proc.stdout + proc.stderr) == (0, "")


def test_actionlint_is_not_vacuous(tmp_path: Path) -> None:
    """actionlint really checks: an output of a step id that does not exist, a
    permission that does not exist and a misspelt action input are errors."""
    text = WORKFLOW.read_text()
    for old, new in (
        ("steps.meta.outputs.version", "steps.metadata.outputs.version"),
        ("packages: write", "package: write"),
        ("registry: ghcr.io", "regsitry: ghcr.io"),
    ):
        assert old in text, old
        text = text.replace(old, new)
    proc = _lint_text(tmp_path, _majors(text))
    assert proc.returncode == 1
    assert '"metadata" is not defined' in proc.stdout, proc.stdout
    assert '"package"' in proc.stdout, proc.stdout
    assert 'input "regsitry" is not defined in action "docker/login-action@v4"' in proc.stdout


def test_triggers() -> None:
    on = _on(_workflow())
    assert set(on) == {"push", "pull_request", "workflow_dispatch"}
    assert on["push"]["tags"] == ["v*"]
    assert on["push"]["branches"] == ["main"] and on["pull_request"]["branches"] == ["main"]


def test_every_action_is_pinned_to_a_release() -> None:
    seen = set()
    for job in _workflow()["jobs"].values():
        for step in job["steps"]:
            if "uses" in step:
                action, _, ref = step["uses"].partition("@")
                assert re.fullmatch(r"v\d+\.\d+\.\d+", ref), step["uses"]
                seen.add(action)
    assert seen == ACTIONS


def test_pull_requests_build_and_tags_publish() -> None:
    """Two jobs building both images for both platforms: one on tags that logs in
    and pushes (the only one with packages: write), one on everything else that
    pushes nothing."""
    workflow = _workflow()
    assert workflow["permissions"] == {"contents": "read"}
    jobs = _build_jobs()
    (publish,) = [j for j in jobs.values() if _steps(j, "docker/login-action")]
    (build,) = [j for j in jobs.values() if not _steps(j, "docker/login-action")]
    assert publish["if"] == "github.ref_type == 'tag'"
    assert build["if"] == "github.ref_type != 'tag'"
    assert publish["permissions"] == {"contents": "read", "packages": "write"}
    assert "permissions" not in build
    assert not _steps(build, "docker/login-action")
    for job, push in ((build, False), (publish, True)):
        names = [_uses(s) for s in job["steps"]]
        (step,) = _steps(job, "docker/build-push-action")
        assert step["with"]["push"] is push
        assert set(step["with"]["platforms"].split(",")) == PLATFORMS
        assert names.index("docker/setup-qemu-action") < names.index("docker/build-push-action")
        assert names.index("docker/setup-buildx-action") < names.index("docker/build-push-action")
        assert _matrix(job) == _matrix(publish)
    (login,) = _steps(publish, "docker/login-action")
    assert login["with"] == {
        "registry": "ghcr.io",
        "username": "${{ github.actor }}",
        "password": "${{ secrets.GITHUB_TOKEN }}",
    }
    names = [_uses(s) for s in publish["steps"]]
    assert names.index("docker/login-action") < names.index("docker/build-push-action")


@pytest.mark.parametrize("doc", ["README.md", "docs/deploy.md"])
def test_documented_builds_push_every_platform_the_release_does(doc: str) -> None:
    """The build commands README.md and docs/deploy.md give for images of your own make
    what the release workflow makes: one multi-platform image per Dockerfile, for its
    platforms (``docker buildx build --platform … --push``). A plain ``docker build``
    gives the workstation's platform only, which the cluster's other nodes cannot run."""
    text = (ROOT / doc).read_text().replace("\\\n", " ")
    builds = [line for line in text.splitlines() if re.match(r"\s*docker (buildx )?build\b", line)]
    assert builds, doc
    dockerfiles = set()
    for line in builds:
        words = line.split()
        assert words[:3] == ["docker", "buildx", "build"], line
        assert "--push" in words, line
        platforms = re.search(r"--platform[ =](\S+)", line)
        assert platforms and set(platforms.group(1).split(",")) == PLATFORMS, line
        dockerfiles.add(re.search(r"-f (\S+)", line).group(1))
    assert dockerfiles == {"Dockerfile.exporter", "Dockerfile.forecaster"}
    assert not re.search(r"^\s*docker push\b", text, flags=re.M), doc


def test_dockerfiles_and_contexts_exist() -> None:
    """Every Dockerfile and build context the workflow names exists, and every
    Dockerfile.* of the repository is built."""
    for job in _build_jobs().values():
        (step,) = _steps(job, "docker/build-push-action")
        built = set()
        for entry in _matrix(job):
            context = ROOT / _fill(step["with"]["context"], {"matrix": entry})
            dockerfile = ROOT / _fill(step["with"]["file"], {"matrix": entry})
            assert context.is_dir(), context
            assert dockerfile.is_file(), dockerfile
            built.add(dockerfile.name)
        assert built == {p.name for p in ROOT.glob("Dockerfile.*")}


def _published(tag: str, meta) -> dict[str, dict[str, str]]:
    """Per image: the publish step's tags and labels, filled in for TAG pushed to
    the project's own repository."""
    repository = _github_repository()
    (step,) = _steps(_publish(), "docker/build-push-action")
    out = {}
    for entry in _matrix(_publish()):
        outputs = meta(tag, entry["image"], repository.split("/")[0])
        assert outputs is not None, f"meta step failed for {tag}"
        context = {
            "matrix": entry,
            "steps": {"meta": {"outputs": outputs}},
            "github": {
                "server_url": "https://github.com",
                "repository": repository,
                "sha": SHA,
            },
        }
        labels = _fill(step["with"]["labels"], context).strip().splitlines()
        out[entry["image"]] = {
            "tags": _fill(step["with"]["tags"], context),
            **dict(label.split("=", 1) for label in labels),
        }
    return out


def _manifest_images() -> dict[str, str]:
    kustomization = yaml.safe_load((MANIFESTS / "base" / "kustomization.yaml").read_text())
    return {image["name"]: str(image["newTag"]) for image in kustomization["images"]}


def _chart_images() -> dict[str, str]:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    return {
        values[part]["image"]["repository"]: str(values[part]["image"]["tag"])
        for part in ("exporter", "forecaster")
    }


def test_pushed_images_are_the_ones_manifests_and_chart_pull(meta) -> None:
    """A tag v<appVersion> pushes exactly the repositories the kustomize base and
    the chart's defaults name, with the tag they pull."""
    app_version = str(_chart()["appVersion"])
    pushed = {}
    for published in _published(f"v{app_version}", meta).values():
        repository, _, tag = published["tags"].rpartition(":")
        pushed[repository] = tag
    assert pushed == _manifest_images()
    assert pushed == _chart_images()
    assert set(pushed.values()) == {app_version}
    # the images install the project at its own version: the same number
    assert _project()["version"] == app_version


def test_labels(meta) -> None:
    project = _project()
    license_ = project["license"]
    license_ = license_ if isinstance(license_, str) else license_["text"]
    assert license_
    for image, published in _published("v0.3.1", meta).items():
        assert published["org.opencontainers.image.title"] == image
        assert published["org.opencontainers.image.source"] == _chart()["sources"][0]
        assert published["org.opencontainers.image.version"] == "0.3.1"
        assert published["org.opencontainers.image.revision"] == SHA
        assert published["org.opencontainers.image.licenses"] == license_


@pytest.mark.parametrize(
    ("tag", "version"),
    [("v0.1.0", "0.1.0"), ("v1.12.3", "1.12.3"), ("v2.0.0-rc.1", "2.0.0-rc.1")],
)
def test_release_tag_to_version(meta, tag: str, version: str) -> None:
    assert meta(tag)["version"] == version


@pytest.mark.parametrize("tag", ["0.1.0", "v0.1", "vnext", "v0.1.0+build.5", "v0.1.0-", "v"])
def test_other_tags_publish_nothing(meta, tag: str) -> None:
    assert meta(tag) is None


def test_image_name_is_lower_case(meta) -> None:
    outputs = meta("v0.1.0", "gpu-eta-forecaster", "GPU-Eta")
    assert outputs["image"] == "ghcr.io/gpu-eta/gpu-eta-forecaster"
