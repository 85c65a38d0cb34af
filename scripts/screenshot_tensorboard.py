"""The README's TensorBoard picture: TensorBoard serving a run's folder on 127.0.0.1, shown in
headless Chromium (Playwright driving Debian's `/usr/bin/chromium`).

    python scripts/screenshot_tensorboard.py runs/tb-mix docs/tensorboard.png
        [--dashboard custom_scalars|scalars|images] [--filter REGEX]

Starts `tensorboard --logdir RUN --host 127.0.0.1` on a free port, opens a dashboard (default
the chart layout `ner fit` writes; `scalars` shows the tags matching `--filter`), waits for the
charts to draw, saves the page and stops the server.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from urllib.parse import quote

from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(base: str, seconds: float = 60) -> None:
    """Block until TensorBoard answers, or fail after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(f"{base}/data/runs", timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit("error: tensorboard did not start") from None
            time.sleep(0.5)


def screenshot(base: str, out: str, dashboard: str, tag_filter: str) -> None:
    """A dashboard of the TensorBoard at `base` (its tags filtered), saved to `out`."""
    with sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, args=ARGS, headless=True,
            viewport={"width": 1400, "height": 1000},
        )  # fmt: skip
        try:
            page = context.new_page()
            page.goto(f"{base}/?darkMode=false#{dashboard}&tagFilter={quote(tag_filter)}")
            page.wait_for_load_state("networkidle", timeout=60_000)
            page.wait_for_timeout(5_000)  # the charts draw their points after the data arrives
            page.screenshot(path=out)
        finally:
            context.close()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("logdir")
    p.add_argument("out")
    p.add_argument("--dashboard", default="custom_scalars", help="the tab to show")
    p.add_argument("--filter", default="val/f1|combiner/weight", help="tags to show (a regex)")
    args = p.parse_args(argv)
    port = free_port()
    command = ["tensorboard", "--logdir", args.logdir, "--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(f"http://127.0.0.1:{port}")
        screenshot(f"http://127.0.0.1:{port}", args.out, args.dashboard, args.filter)
    finally:
        server.terminate()
        server.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
