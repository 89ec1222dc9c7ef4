"""Shared fixtures: the built site (once per session) and a local server for it."""
import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")  # before any module defines a @triton.jit kernel
os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")
ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
SITE_PATH = "ai-infra-kb"  # the path of site_url in mkdocs.yml; the language switch fetches its sitemap


def mkdocs_build(config: Path, site_dir: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config),
                           "-d", str(site_dir)], cwd=cwd, capture_output=True, text=True)


@pytest.fixture
def host_check(tmp_path):
    """build(name, source, include) -> path of a host executable compiled from a C++ check of a CUDA header
    (skips the test when the machine has no C++ compiler)."""
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler on PATH to build a host check of a CUDA header")

    def build(name: str, source: str, include: Path) -> Path:
        src, exe = tmp_path / f"{name}.cpp", tmp_path / name
        src.write_text(source)
        subprocess.run([cxx, "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-I", str(include), str(src),
                        "-o", str(exe)], check=True, capture_output=True)
        return exe
    return build


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> Path:
    """The real site, built --strict from scratch into a temporary folder. The build runs in an empty
    directory of its own, so mkdocs-jupyter's cache (.cache/ under the working directory) starts empty and
    is never shared with a build that another test worker runs at the same time."""
    out = tmp_path_factory.mktemp("served") / SITE_PATH
    start = time.perf_counter()
    r = mkdocs_build(ROOT / "mkdocs.yml", out, cwd=tmp_path_factory.mktemp("build-cwd"))
    seconds = time.perf_counter() - start
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stderr[-4000:]}"
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "build-seconds.txt").write_text(f"{seconds:.1f}\n")
    return out


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium driven by Playwright (never `playwright install`), shared by every browser test;
    `browser.devices` holds Playwright's device descriptors for phone emulation."""
    sync_api = pytest.importorskip("playwright.sync_api")
    assert Path(CHROMIUM).exists(), "Debian chromium is missing: `make test` installs it (make browser-deps)"
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        b.devices = p.devices
        yield b
        b.close()


@pytest.fixture(scope="session")
def site_url(built_site):
    handler = functools.partial(_QuietHandler, directory=str(built_site.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/{SITE_PATH}/"
    server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


# Test lanes. `make check` runs what is neither slow nor gpu (< 1 min on 2 cores); `make test` adds the slow lane.
# Slow: files whose tests execute notebooks, interpret Triton kernels, compile CUDA, start process groups or
# build the site. GPU: tests skipped without CUDA (their skip reason says so); the GPU workflow runs `pytest -m gpu`.
SLOW_FILES = {"test_browser.py", "test_reading.py", "test_light.py", "test_a11y.py", "test_notebooks.py", "test_site.py",
              "test_new_question.py", "test_gpu_run.py",
              "test_inference_serving.py", "test_inference_paged_kv.py", "test_inference_mma.py", "test_moe.py",
              "test_fusion.py", "test_fusion_cases.py", "test_gemm.py", "test_kernel_agent.py",
              "test_kernel_agent_redteam.py", "test_kernel_agent_sandbox.py",
              "test_nccl_busbw.py", "test_nccl_doctor.py", "test_nccl_messages.py", "test_nccl_info.py",
              "test_search.py", "test_colab.py", "test_zero.py", "test_pipeline.py", "test_tp.py", "test_cp.py", "test_ckpt.py"}
# Serial: files whose tests write into the checkout itself (test_gpu_run scaffolds notebooks/90-fixture-lab.ipynb,
# which docs/labs shows to a site build running beside it); `make test` runs them before the parallel slow lane.
SERIAL_FILES = {"test_gpu_run.py"}
_GPU_WORDS = ("GPU", "CUDA", "Hopper", "sm_90")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
        if item.path.name in SERIAL_FILES:
            item.add_marker(pytest.mark.serial)
        for mark in item.iter_markers("skipif"):
            reason = mark.kwargs.get("reason", "")
            if any(w in reason for w in _GPU_WORDS) and "nvcc" not in reason:
                item.add_marker(pytest.mark.gpu)
