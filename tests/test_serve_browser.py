"""The page of `ner serve` in a real browser: Playwright driving Debian's chromium.

The app runs in-process (uvicorn in a thread, on a free loopback port, with a real inference
worker); chromium is `/usr/bin/chromium` (`.ci/run` installs it when missing): under CI=true a
missing one fails, elsewhere the test is skipped.

Run as a script, it screenshots the page of a running server (the README's picture):
    python tests/test_serve_browser.py http://127.0.0.1:8000 docs/serve.png
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from functools import partial
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
# an emoji (two UTF-16 units, one code point) before the entities, and a line break between them
TEXT = "😀 John Smith visited Paris today .\nMary met Reuters in Berlin ."


@pytest.fixture(scope="module")
def chromium() -> Path:
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} missing (required under CI=true; .ci/run installs it)")
        pytest.skip(f"{CHROMIUM} not found (apt-get install -y chromium)")
    return CHROMIUM


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def url(trained):
    """The app on a loopback port, its worker ready."""
    import httpx
    import uvicorn
    from litserve.utils import wrap_litserve_start

    from ner.cli.serve import describe
    from ner.model.tagger import load_tagger
    from ner.serving.loader import load_model
    from ner.serving.server import build_server

    ckpt = str(trained["ckpt"] / "best.ckpt")
    info = describe(load_tagger(ckpt), argparse.Namespace(checkpoint=ckpt, backend="torch",
                                                          quantize=None))  # fmt: skip
    server = build_server(partial(load_model, ckpt, "torch", None, "cpu"), info, threads=1)
    with wrap_litserve_start(server) as started:
        port = free_port()
        config = uvicorn.Config(started.app, host="127.0.0.1", port=port, log_level="warning")
        web = uvicorn.Server(config)
        thread = threading.Thread(target=web.run, daemon=True)
        thread.start()
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the server did not get ready"
            time.sleep(0.2)
        try:
            yield base
        finally:
            web.should_exit = True
            thread.join(30)


def open_page(playwright, profile: Path, base: str):
    """A chromium with a fresh profile, on the page."""
    context = playwright.chromium.launch_persistent_context(
        str(profile), executable_path=str(CHROMIUM), args=ARGS, headless=True,
        viewport={"width": 1000, "height": 720},
    )  # fmt: skip
    page = context.new_page()
    page.goto(f"{base}/ui/")
    page.wait_for_function("document.querySelectorAll('#legend span').length > 0")
    return context, page


def tag(page, text: str) -> None:
    """Type `text` into the box and press Tag; wait for the answer."""
    box = page.locator("#text")
    box.fill("")
    box.press_sequentially(text)
    page.click("#tag")
    page.wait_for_function("document.querySelector('#status').textContent.includes('entities')")


def test_the_page_highlights_the_entities_after_an_emoji(chromium, url, trained, tmp_path):
    from playwright.sync_api import sync_playwright

    from ner.model.tagger import load_tagger

    expected = load_tagger(str(trained["ckpt"] / "best.ckpt")).predict([TEXT])[0]
    assert len(expected) >= 3 and expected[0]["start"] > 0  # entities after the emoji
    with sync_playwright() as playwright:
        context, page = open_page(playwright, tmp_path / "profile", url)
        try:
            tag(page, TEXT)
            assert page.locator("#text").input_value() == TEXT  # typed as it is
            marks = page.locator("#output mark.entity").all()
            shown = [
                (m.locator(".text").inner_text(), m.locator(".label").inner_text()) for m in marks
            ]
            assert shown == [(e["text"], e["label"]) for e in expected]
            # between the marks: the text itself, its line break kept (labels left out)
            plain = page.evaluate(
                "() => { const o = document.querySelector('#output').cloneNode(true);"
                " o.querySelectorAll('.label').forEach((l) => l.remove()); return o.textContent; }"
            )
            assert plain == TEXT
            assert len({m.evaluate("m => m.style.background") for m in marks}) == len(
                {e["label"] for e in expected}
            )  # one colour a type
            rows = page.locator("#entity-table tbody tr").all()
            assert [r.locator("td").nth(0).inner_text() for r in rows] == [
                e["text"] for e in expected
            ]
            assert page.locator("#word-table").is_hidden()
            page.check("#show-words")
            words = page.locator("#word-table tbody tr td:first-child").all_inner_texts()
            assert words == TEXT.split()
            page.screenshot(path=str(tmp_path / "serve.png"), full_page=True)
        finally:
            context.close()
    assert (tmp_path / "serve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def screenshot(base: str, out: str, text: str) -> None:
    """The page of the server at `base` after tagging `text`, saved to `out`."""
    import tempfile

    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
        context, page = open_page(playwright, Path(profile), base)
        try:
            tag(page, text)
            tag(page, text)  # the figure of a warm server
            page.screenshot(path=out, full_page=True)
        finally:
            context.close()


if __name__ == "__main__":
    words = sys.argv[3] if len(sys.argv) > 3 else TEXT
    screenshot(sys.argv[1], sys.argv[2], words)
