"""scripts/dockerfile_steps.py turns Dockerfile.igpu into the bash script the aarch64 check runs in the arm64 root
(no Docker engine there). Each instruction it emulates is run here for real, in a scratch tree, and what it cannot
emulate must be refused, so no step of the image slips past the check unrun."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
STEPS = REPO / "scripts" / "dockerfile_steps.py"


def _convert(dockerfile: Path, src: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(STEPS), str(dockerfile), "--src", str(src)],
                          capture_output=True, text=True, timeout=60)


def _run_steps(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(text)
    converted = _convert(dockerfile, tmp_path / "src")
    assert converted.returncode == 0, converted.stderr
    return subprocess.run(["bash", "-c", converted.stdout], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", **(env or {})})


@pytest.fixture
def src(tmp_path: Path) -> Path:
    """A checkout with a file to copy and the local folders the COPY must leave out."""
    root = tmp_path / "src"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("x = 1\n")
    for local in (".venv", ".triton", ".models", ".cache"):
        (root / local).mkdir()
        (root / local / "big").write_text("host only")
    return root


def test_each_emulated_instruction_runs_as_docker_would(tmp_path: Path, src: Path) -> None:
    out = tmp_path / "out"
    result = _run_steps(tmp_path, f"""\
# a comment
ARG BASE=debian:12
FROM ${{BASE}}
ARG FLAVOUR=plain
ARG OVERRIDDEN=default
ENV GREETING=hello \\
    # a comment inside a continued instruction
    PATH=/opt/tool/bin:$PATH
ENV LEGACY some words
COPY . {out}/app
WORKDIR {out}/app/pkg
RUN echo "$GREETING $FLAVOUR $OVERRIDDEN" > greeting \\
    && echo "$LEGACY" > legacy && echo "$PATH" > path && pwd > cwd
RUN ["touch", "exec form"]
CMD ["appliance", "run"]
EXPOSE 9108
""", env={"OVERRIDDEN": "from --build-arg"})
    assert result.returncode == 0, result.stdout + result.stderr
    app = out / "app"
    assert (app / "pkg" / "mod.py").read_text() == "x = 1\n"
    assert not any((app / local).exists() for local in (".venv", ".triton", ".models", ".cache"))
    assert (app / "pkg" / "greeting").read_text() == "hello plain from --build-arg\n"
    assert (app / "pkg" / "legacy").read_text() == "some words\n"
    assert (app / "pkg" / "path").read_text() == "/opt/tool/bin:/usr/bin:/bin\n"
    assert (app / "pkg" / "cwd").read_text() == f"{app / 'pkg'}\n"
    assert (app / "pkg" / "exec form").is_file()
    assert result.stdout.rstrip().endswith("dockerfile: every step ran")
    # An ARG before FROM parameterizes FROM only; Docker does not hand it to the steps.
    assert "BASE" not in _convert(tmp_path / "Dockerfile", src).stdout


def test_a_failing_step_stops_the_script(tmp_path: Path, src: Path) -> None:
    result = _run_steps(tmp_path, f"FROM x\nRUN false\nRUN touch {tmp_path}/after\n")
    assert result.returncode != 0
    assert not (tmp_path / "after").exists()


@pytest.mark.parametrize("line, reason", [
    ("ADD https://example.invalid/x.tar /opt/", "ADD is not emulated"),
    ("SHELL [\"/bin/sh\", \"-c\"]", "SHELL is not emulated"),
    ("COPY --from=build /a /b", "options are not emulated"),
    ("COPY --chown=1000 . /opt/app", "options are not emulated"),
    ("COPY requirements.txt /opt/", "only 'COPY . DEST' is emulated"),
    ("RUN --mount=type=cache,target=/root/.cache pip install x", "options are not emulated"),
    ("RUN [\"echo\", \"unterminated\"", "error:"),
    ("ARG A=1 B=2", "one NAME[=default] per ARG"),
    ("RUN echo continued \\", "ends inside a continued instruction"),
])
def test_what_cannot_be_emulated_is_refused(tmp_path: Path, line: str, reason: str) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(f"FROM x\n{line}\n")
    result = _convert(dockerfile, tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert reason in result.stderr and str(dockerfile) in result.stderr


def test_the_igpu_dockerfile_is_emulated_whole_and_builds_what_the_engine_profiles_read() -> None:
    result = _convert(REPO / "Dockerfile.igpu", Path("/work/appliance"))
    assert result.returncode == 0, result.stderr
    text = (REPO / "Dockerfile.igpu").read_text()
    models = "/var/lib/appliance/models"
    assert f"APPLIANCE_MODELS_DIR={models}" in text
    for profile in sorted((REPO / "engines").glob("*.yaml")):
        spec = yaml.safe_load(profile.read_text())
        for section in ("calibration", "gate"):
            for source in (spec.get(section) or {}).get("sources", []):
                if not source["path"].startswith("/"):  # relative: under the models root the image fills
                    assert f"{models}/{source['path']}" in text, \
                        f"{profile.name} {section} reads {source['path']}, which Dockerfile.igpu does not build"


def test_the_igpu_image_runs_as_an_unprivileged_user_with_device_groups_and_a_healthcheck() -> None:
    import json
    import shlex

    sys.path.insert(0, str(REPO / "scripts"))
    try:
        from dockerfile_steps import instructions
    finally:
        sys.path.remove(str(REPO / "scripts"))
    steps = instructions((REPO / "Dockerfile.igpu").read_text())
    keywords = [k for k, _ in steps]
    users = [args for k, args in steps if k == "USER"]
    assert users == ["appliance"] and keywords.index("USER") > max(i for i, k in enumerate(keywords) if k == "RUN")
    (useradd,) = [args for k, args in steps if k == "RUN" and "useradd" in args]
    assert "--groups video,render appliance" in useradd and "chown -R appliance:appliance /var/lib/appliance" in useradd
    assert "id appliance" in useradd and "getent group render" in useradd  # idempotent: the arm64 root reruns it
    (check,) = [args for k, args in steps if k == "HEALTHCHECK"]
    options, _, command = check.partition("CMD ")
    assert "--start-period=" in options  # the first start builds the engine
    argv = json.loads(command)
    assert argv[0] == "/opt/appliance/venv/bin/python" and "/livez" in argv[-1], shlex.join(argv)


def test_the_healthcheck_command_fails_on_503_and_passes_on_200() -> None:
    import http.server
    import json
    import threading

    text = (REPO / "Dockerfile.igpu").read_text()
    code = json.loads(text[text.index("CMD [", text.index("HEALTHCHECK")) + 4:].splitlines()[0])[-1]
    status = {"code": 503}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status["code"] if self.path == "/livez" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {"APPLIANCE_LIVEZ_URL": f"http://127.0.0.1:{server.server_port}/livez"}
        assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True).returncode != 0
        status["code"] = 200
        assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True).returncode == 0
    finally:
        server.shutdown()
