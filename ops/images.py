"""Build Sluice's images with a real Docker engine from Debian's packages only, no registry pull.

    python -m ops.images trainer|server|airflow [--tag T]   # build docker/<image>.Dockerfile; print tag, size

- The engine: Debian's `docker.io` dockerd, started here on a socket of its own (no systemd on
  these machines; cgroup v1, so no bridge and no iptables: builds use the host's network, which
  reaches pip's indexes). Its data root is cached between runs (/var/cache/sluice-docker), so
  the base image and the build's layers are kept on one machine.
- The base: `debootstrap --variant=minbase bookworm` with Python 3.11, its venv module, git and CA
  certificates (about a minute), imported as `sluice-base:bookworm-r2`: the Dockerfiles' BASE_IMAGE.
- torch: the CPU wheel pip finds on this machine's disk (PIP_FIND_LINKS, /opt/wheels), served on
  loopback for the build; the production default, the CUDA build, has not been built here.

The k8s tier (tests/k8s/) builds all three images this way, loads the trainer and the server into
the cluster's containerd, and runs the Airflow image with Docker. `docker` and `debootstrap` come
from `.ci/run` (apt). A Dockerfile installs its libraries before it copies the code, so a change of
code rebuilds only its last layers (docker/README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tasks.core.log import log
from tasks.core.settings import REPO_ROOT
from tasks.core.wait import wait_until

DATA_ROOT = Path(os.environ.get("SLUICE_DOCKER_ROOT", "/var/cache/sluice-docker"))
# The wheel folder's port on 127.0.0.1, fixed: it is in the pip command of an image's library layer
# (TORCH_PIP_ARGS), and a port chosen afresh each build would change that layer's cache key.
WHEELS_PORT = int(os.environ.get("SLUICE_WHEELS_PORT", "38471"))
BASE_IMAGE = "sluice-base:bookworm-r2"  # -rN: the recipe below; a new N when it changes (cached per data root)
BASE_PACKAGES = ("python3", "python3-venv", "git", "ca-certificates")
SUITE = "bookworm"


@dataclass
class Engine:
    """A dockerd of our own: `docker(...)` talks to it."""

    run_dir: Path
    proc: subprocess.Popen | None = None

    @property
    def host(self) -> str:
        return f"unix://{self.run_dir}/docker.sock"

    def docker(self, *args: str, timeout: float = 1800, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", "-H", self.host, *args], timeout=timeout, text=True, **kw)

    def has_image(self, tag: str) -> bool:
        return self.docker("image", "inspect", tag, capture_output=True, timeout=60).returncode == 0

    def size(self, tag: str) -> int:
        out = self.docker("image", "inspect", "-f", "{{.Size}}", tag, capture_output=True, check=True, timeout=60)
        return int(out.stdout.strip())


@contextlib.contextmanager
def engine(data_root: Path = DATA_ROOT) -> Iterator[Engine]:
    """dockerd on a socket in a fresh folder, its data root `data_root`; stopped on exit."""
    for tool in ("dockerd", "docker"):
        if not shutil.which(tool):
            raise RuntimeError(f"{tool} is not installed: apt-get install docker.io (Debian's Docker engine)")
    data_root.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="sluice-dockerd-"))  # short: its sockets' paths must fit 108 bytes
    e = Engine(run_dir)
    with open(run_dir / "dockerd.log", "w") as out:
        e.proc = subprocess.Popen(
            [
                "dockerd",
                f"--host={e.host}",
                f"--data-root={data_root}",
                f"--exec-root={run_dir}/exec",
                f"--pidfile={run_dir}/docker.pid",
                "--bridge=none",
                "--iptables=false",
                "--ip6tables=false",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until(
            lambda: e.proc.poll() is not None or e.docker("version", capture_output=True, timeout=10).returncode == 0,
            timeout_s=180,  # it loads its data root first: longer when that holds many layers
            interval_s=0.5,
            what="dockerd to answer",
            retry_on=(subprocess.TimeoutExpired,),  # a `docker version` that hangs while dockerd starts
        )
        if e.proc.poll() is not None:
            raise RuntimeError(f"dockerd exited: {(run_dir / 'dockerd.log').read_text()[-2000:]}")
        yield e
    finally:
        e.proc.terminate()
        try:
            e.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            e.proc.kill()
            e.proc.wait()
        shutil.rmtree(run_dir, ignore_errors=True)


def _mirror() -> str:
    """The machine's own Debian mirror (apt's first deb entry)."""
    for f in [Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")]:
        if f.exists():
            for line in f.read_text().splitlines():
                words = line.split()
                if line.startswith("URIs:") and len(words) > 1:
                    return words[1]
                if line.startswith("deb ") and len(words) > 1:
                    return words[1]
    return "http://deb.debian.org/debian"


def base_image(e: Engine) -> str:
    """`sluice-base:bookworm-r2`, made once per data root from Debian's packages."""
    if e.has_image(BASE_IMAGE):
        return BASE_IMAGE
    if not shutil.which("debootstrap"):
        raise RuntimeError("debootstrap is not installed: apt-get install debootstrap")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sluice-rootfs-") as root:
        log(f"images: debootstrap {SUITE} ({', '.join(BASE_PACKAGES)}) from {_mirror()}")
        subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE, root, _mirror()],
            check=True,
            capture_output=True,
            timeout=1200,
        )
        # The machine's own trust (a CA of its egress proxy, say): pip in the builds reaches the indexes this
        # machine reaches, and checks their certificates against the same anchors.
        local_cas = sorted(Path("/usr/local/share/ca-certificates").glob("*.crt"))
        for ca in local_cas:
            shutil.copy(ca, Path(root) / "usr/local/share/ca-certificates" / ca.name)
        if local_cas:
            subprocess.run(["chroot", root, "update-ca-certificates"], check=True, capture_output=True, timeout=120)
        # debootstrap leaves its downloaded packages and apt's lists behind: ~150 MB no image needs
        subprocess.run(["chroot", root, "apt-get", "clean"], check=True, capture_output=True, timeout=120)
        shutil.rmtree(Path(root) / "var/lib/apt/lists", ignore_errors=True)
        (Path(root) / "var/lib/apt/lists/partial").mkdir(parents=True)
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        bundle = "/etc/ssl/certs/ca-certificates.crt"
        e.docker(
            "import",
            *[f"--change=ENV {k}={bundle}" for k in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")],
            "-",
            BASE_IMAGE,
            stdin=tar.stdout,
            check=True,
            capture_output=True,
        )
        if tar.wait() != 0:
            raise RuntimeError("tar of the base root filesystem failed")
    log(f"images: {BASE_IMAGE} made in {time.monotonic() - started:.0f} s")
    return BASE_IMAGE


@contextlib.contextmanager
def wheel_folder(folder: Path, port: int = WHEELS_PORT) -> Iterator[str]:
    """A folder of wheels as a pip find-links page on 127.0.0.1:`port` (the build runs on the host's network)."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:  # pip asks for the page once per package: hundreds of lines
            pass

    handler = functools.partial(Quiet, directory=str(folder))
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as exc:
        raise RuntimeError(
            f"the wheel folder's port 127.0.0.1:{port} is taken ({exc}): set SLUICE_WHEELS_PORT to a free one "
            "(a new port rebuilds the images' library layers once)"
        ) from exc
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.shutdown()
        server.server_close()


def torch_pin() -> str:
    """constraints.txt's torch version (2.13.0+cpu)."""
    pin = next(ln for ln in (REPO_ROOT / "constraints.txt").read_text().splitlines() if ln.startswith("torch=="))
    return pin.split("==", 1)[1]


def torch_wheels() -> Path:
    """The folder pip's find-links names that holds the pinned CPU torch wheel."""
    version, folders = torch_pin(), os.environ.get("PIP_FIND_LINKS", "/opt/wheels")
    for folder in folders.split():
        if list(Path(folder).glob(f"torch-{version.replace('+', '*')}-*.whl")):
            return Path(folder)
    raise RuntimeError(f"no wheel of torch=={version} in PIP_FIND_LINKS ({folders})")


DOCKERFILES = {
    "trainer": "docker/trainer.Dockerfile",
    "server": "docker/server.Dockerfile",
    "airflow": "docker/airflow.Dockerfile",
}


def build(e: Engine, image: str, tag: str | None = None) -> str:
    """docker/<image>.Dockerfile FROM the Debian-made base; returns the tag (default sluice-<image>:local).

    The trainer and the Airflow image take torch from the pinned CPU wheel on this machine's disk; the
    other libraries come from pip's indexes over the host's network, as for every image."""
    if image not in DOCKERFILES:
        raise ValueError(f"no image {image!r}: one of {', '.join(DOCKERFILES)}")
    tag = tag or f"sluice-{image}:local"
    started = time.monotonic()
    args = {"BASE_IMAGE": base_image(e), "SLUICE_CODE_COMMIT": _commit()}
    with contextlib.ExitStack() as stack:
        if image in ("trainer", "airflow"):
            url = stack.enter_context(wheel_folder(torch_wheels()))
            args["TORCH_PIP_ARGS"] = f"--find-links {url}"  # only that folder has torch 2.13.0+cpu
        if image == "trainer":
            args["TORCH_VERSION"] = torch_pin()
        log(f"images: building {tag} ({DOCKERFILES[image]} FROM {args['BASE_IMAGE']})")
        out = e.docker(
            "build",
            "--network=host",
            "-f",
            DOCKERFILES[image],
            "-t",
            tag,
            *[f"--build-arg={k}={v}" for k, v in args.items()],
            ".",
            cwd=REPO_ROOT,
            capture_output=True,
        )
    if out.returncode != 0:
        raise RuntimeError(f"docker build of {tag} failed:\n{(out.stdout + out.stderr)[-4000:]}")
    # the image this tag named before is dangling now: keep the cached data root from growing by one a build
    e.docker("image", "prune", "--force", capture_output=True, timeout=600)
    log(f"images: {tag} built in {time.monotonic() - started:.0f} s, {e.size(tag) / 1e6:.0f} MB")
    return tag


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ops.images", description=__doc__.split("\n\n")[0])
    ap.add_argument("image", choices=["base", *DOCKERFILES])
    ap.add_argument("--tag", default=None, help="the image's tag (default: sluice-IMAGE:local)")
    a = ap.parse_args(argv)
    with engine() as e:
        tag = base_image(e) if a.image == "base" else build(e, a.image, a.tag)
        print(f"{tag} {e.size(tag)} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
