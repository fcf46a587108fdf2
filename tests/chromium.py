"""Headless Chromium for the report tests, driven through the DevTools protocol (no Python dependency): the
HTML reports are opened in it to check that they render, make no request and raise no error, and to take
screenshots. `chromium` is a Debian package (.ci/run installs it); CHROMIUM=/path/to/binary overrides."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest


def require_chromium() -> str:
    """The binary, or skip the test (fail it under CI=true, where Chromium is required)."""
    binary = chromium_binary()
    if not binary:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("chromium is required in CI: apt-get install chromium (see .ci/run)")
        pytest.skip("chromium not installed (apt-get install chromium); CI=true makes this a failure")
    return binary


def chromium_binary() -> str | None:
    """The Chromium to drive: $CHROMIUM, else the first of chromium, chromium-browser, google-chrome on PATH."""
    override = os.environ.get("CHROMIUM")
    if override:
        return override
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


class Browser:
    """Chromium driven through the DevTools protocol over --remote-debugging-pipe (fd 3 in, fd 4 out)."""

    def __init__(self, binary: str, profile_dir: Path, log: Path):
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-default-apps", "--disable-extensions", "--hide-scrollbars", "--mute-audio",
                 f"--user-data-dir={profile_dir}", "--remote-debugging-pipe", "about:blank"]
        self._log = open(log, "wb")
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}', binary, *flags],
            pass_fds=(to_chrome_r, from_chrome_w), stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._next_id = 0
        self._messages: queue.Queue = queue.Queue()
        self.events: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buf = b""
        while True:
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                self._messages.put(None)
                return
            buf += chunk
            *messages, buf = buf.split(b"\0")
            for m in messages:
                self._messages.put(json.loads(m))

    def _next(self, deadline: float) -> dict:
        try:
            msg = self._messages.get(timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Empty:
            raise TimeoutError("Chromium did not answer in time") from None
        if msg is None:
            raise RuntimeError("Chromium exited")
        if "method" in msg:
            self.events.append(msg)
        return msg

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30):
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._next(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def wait_for(self, method: str, session: str, timeout: float = 30) -> dict:
        seen = len(self.events)
        deadline = time.monotonic() + timeout
        while True:
            for e in self.events[seen:]:
                if e["method"] == method and e.get("sessionId") == session:
                    return e
            seen = len(self.events)
            self._next(deadline)

    def new_page(self, width: int, height: int) -> str:
        """A blank tab of width x height CSS pixels with the Page, Network, Runtime and Log events on; its
        session id."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Network", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=session)
        return session

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        self._log.close()


def page_problems(events: list[dict], allowed_urls: set[str]) -> list[str]:
    """Requests to anything but the allowed URLs, console and log errors, exceptions and dialogs: what a
    self-contained report page must never cause."""
    out = []
    for e in events:
        p = e.get("params", {})
        if e["method"] == "Network.requestWillBeSent" and p["request"]["url"] not in allowed_urls \
                and not p["request"]["url"].startswith("data:"):
            out.append(f"request: {p['request']['url'][:200]}")
        elif e["method"] == "Log.entryAdded" and p["entry"]["level"] == "error":
            out.append(f"log: {p['entry'].get('text', '')[:300]}")
        elif e["method"] == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
            out.append(f"console: {str(p.get('args'))[:300]}")
        elif e["method"] in ("Runtime.exceptionThrown", "Page.javascriptDialogOpening"):
            out.append(f"{e['method']}: {str(p)[:300]}")
    return out
