"""The README's picture of `mrc dash`: run `mrc demo --dash`, open its page in
Debian's headless chromium, and save a screenshot shortly after the demo cuts
a whole plane (when the page's timeline shows the plane's links go down).

    python tools/dash_screenshot.py [--out docs/img/dash.png] [--port 8090] [--after 1.5]

Needs root (the demo builds a fabric), the dash extra and the test tools
(selenium; chromium and chromium-driver from Debian: `tools/setup.sh test`
installs them). Prints the demo's output on stderr as it goes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request


def browser(width: int, height: int, profile: str):
    os.environ["SE_OFFLINE"] = "true"  # never fetch a browser or a driver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        raise SystemExit("needs Debian's chromium and chromium-driver: apt-get install chromium chromium-driver")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              f"--window-size={width},{height}", "--user-data-dir=" + profile):
        opts.add_argument(a)
    return webdriver.Chrome(options=opts, service=Service(driver))


def plane_cut(port: int) -> bool:
    """The page's last update shows a plane whose T0-T1 links are all down
    while the QP still runs."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/state", timeout=5) as r:
        s = json.load(r)
    tick, lay = s.get("tick") or {}, s["layout"]
    links = tick.get("links", {})
    for p in range(lay["planes"]):
        up = [ln["id"] for ln in lay["links"] if ln["plane"] == p and ln["tier"] == "t0-t1"]
        if up and all(links.get(i, {}).get("state") == "down" for i in up):
            return bool(tick.get("contexts")) and bool(tick.get("grids"))
    return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="docs/img/dash.png", help="the PNG to write (default docs/img/dash.png)")
    ap.add_argument("--port", type=int, default=8090, help="the web view's port (default 8090)")
    ap.add_argument("--after", type=float, default=1.5, help="seconds after the plane cut to take it (default 1.5)")
    ap.add_argument("--size", default="1600x1250", help="browser window, WxH (default 1600x1250)")
    a = ap.parse_args()
    w, h = (int(x) for x in a.size.split("x"))
    demo = subprocess.Popen([sys.executable, "-m", "mrc", "demo", "--dash", "--dash-port", str(a.port),
                             "--dash-wait", "60", "--dash-linger", "3"], stdout=subprocess.PIPE, text=True)
    url: list[str] = []
    seen = threading.Event()

    def relay() -> None:
        for line in demo.stdout:
            sys.stderr.write(line)
            m = re.search(r"open (http://\S+)", line)
            if m and not url:
                url.append(m.group(1))
                seen.set()
        seen.set()

    threading.Thread(target=relay, daemon=True).start()
    drv = None
    profile = tempfile.mkdtemp(prefix="mrc-chromium-")
    try:
        if not seen.wait(120) or not url:
            raise SystemExit("the demo printed no web view URL")
        drv = browser(w, h, profile)
        drv.get(url[0])
        deadline = time.monotonic() + 300
        while not plane_cut(a.port):
            if demo.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the demo ended before the page showed a plane cut")
            time.sleep(0.1)
        time.sleep(a.after)
        os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
        drv.save_screenshot(a.out)
        print(f"wrote {a.out}", file=sys.stderr)
    finally:
        if drv is not None:
            drv.quit()
        shutil.rmtree(profile, ignore_errors=True)
        rc = demo.wait(600)
    return rc


if __name__ == "__main__":
    sys.exit(main())
