"""A headless Chromium driven over the DevTools protocol, with the standard library only.

`--remote-debugging-pipe` makes the browser read protocol commands from fd 3 and write replies
and events to fd 4, each a JSON message ended by a NUL byte (the transport Puppeteer's pipe mode
uses), so tests need neither Playwright nor a websocket client. The browser is Debian's
`chromium` (Debian's package) or whatever COMPILER_TEST_BROWSER names.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import tempfile
import time

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def find_browser() -> str | None:
    path = os.environ.get("COMPILER_TEST_BROWSER")
    if path:
        return path if os.path.exists(path) else shutil.which(path)
    return next((p for p in map(shutil.which, NAMES) if p), None)


class BrowserError(RuntimeError):
    pass


class Browser:
    """One headless browser process with one page (tab) attached."""

    def __init__(self, executable: str, width: int = 1400, height: int = 1000,
                 timeout: float = 30.0):
        self.timeout = timeout
        self.events: list[dict] = []
        self._next_id = 0
        self._buffer = b""
        self._profile = tempfile.mkdtemp(prefix="plan-html-browser-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire_fds():  # in the child: the protocol's fixed descriptors
            a, b = os.dup(to_browser_r), os.dup(from_browser_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [executable, "--headless", "--no-sandbox", "--disable-gpu",
                "--remote-debugging-pipe", f"--user-data-dir={self._profile}",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update",
                "--disable-dev-shm-usage", f"--window-size={width},{height}", "about:blank"]
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=self._stderr,
                                     close_fds=False, preexec_fn=wire_fds)
        os.close(to_browser_r)
        os.close(from_browser_w)
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target,
                                 flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.send(f"{domain}.enable")

    # -- transport ---------------------------------------------------------------------------
    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise BrowserError("browser did not answer in time" + self._log())
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise BrowserError("browser closed the pipe" + self._log())
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def _log(self) -> str:
        self._stderr.seek(0)
        return ":\n" + self._stderr.read()[-2000:].decode(errors="replace")

    def call(self, method: str, session: str | None = None, **params) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def send(self, method: str, **params) -> dict:
        """A command to the page's session."""
        return self.call(method, session=self.session, **params)

    def wait_for(self, method: str) -> dict:
        deadline = time.monotonic() + self.timeout
        seen = len(self.events)
        while True:
            for event in self.events[seen:]:
                if event["method"] == method:
                    return event
            seen = len(self.events)
            self.events.append(self._read_message(deadline))

    # -- what tests use -----------------------------------------------------------------------
    def open(self, url: str, offline: bool = True):
        """Load `url` (with the network switched off unless told) and wait for its load event."""
        self.send("Network.emulateNetworkConditions", offline=offline, latency=0,
                  downloadThroughput=-1, uploadThroughput=-1)
        self.events.clear()
        self.send("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")

    def eval(self, expression: str):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def click(self, x: float, y: float):
        """A real mouse click at viewport coordinates (press and release)."""
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left",
                      clickCount=1)

    def screenshot(self, path: str, full_page: bool = False):
        import base64
        params = {"format": "png", "captureBeyondViewport": full_page}
        data = self.send("Page.captureScreenshot", **params)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events
                if e["method"] == "Network.requestWillBeSent"]

    def errors(self) -> list[str]:
        """Script exceptions and console/log errors (a refused fetch shows here)."""
        out = []
        for e in self.events:
            if e["method"] == "Runtime.exceptionThrown":
                out.append(json.dumps(e["params"]["exceptionDetails"])[:500])
            elif e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] == "error":
                out.append(e["params"]["entry"]["text"])
            elif (e["method"] == "Runtime.consoleAPICalled"
                  and e["params"]["type"] in ("error", "assert")):
                out.append(json.dumps(e["params"]["args"])[:500])
        return out

    def close(self):
        try:
            self.call("Browser.close")
        except (BrowserError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        self._stderr.close()
        shutil.rmtree(self._profile, ignore_errors=True)
