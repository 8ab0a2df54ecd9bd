"""A screenshot of the page of ``transduce serve``, for docs/serving.md.

    python benchmarks/page_screenshot.py --run runs/multi30k-small --out docs/serve-page.png \
        [--text "A man in a blue shirt is riding a bicycle."] [--hover 2]

Starts the server on a free port, opens the page in headless Chromium (Debian's ``chromium`` and
``chromium-driver``, driven by selenium), types the text, presses Translate, hovers the target
piece number ``--hover`` and saves the window. Needs the dev extra.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--text", default="A man in a blue shirt is riding a bicycle down the "
                                          "street.")
    parser.add_argument("--hover", type=int, default=2, help="the target piece to hover (0 is the "
                                                             "first)")
    parser.add_argument("--size", default="1280,1150", help="the window in pixels, WIDTH,HEIGHT")
    args = parser.parse_args()

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    server = subprocess.Popen(
        [sys.executable, "-m", "transduce", "serve", args.run, "--port", "0", "--no-access-log"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = next(line.split()[1] for line in server.stderr if line.startswith("open http://"))
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        f"--window-size={args.size}",
        "--hide-scrollbars",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(
        service=Service(executable_path=shutil.which("chromedriver")), options=options
    )
    try:
        wait = WebDriverWait(driver, 120)
        driver.get(url)
        wait.until(ready.text_to_be_present_in_element((By.ID, "model-meta"), "parameters"))
        source = driver.find_element(By.ID, "source")
        source.clear()
        source.send_keys(args.text)
        driver.find_element(By.ID, "translate").click()
        wait.until(ready.visibility_of_element_located((By.ID, "heatmap")))
        pieces = driver.find_elements(By.CSS_SELECTOR, "#target-strip .piece")
        ActionChains(driver).move_to_element(pieces[min(args.hover, len(pieces) - 1)]).perform()
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(args.out)
        print(f"wrote {args.out}: {driver.find_element(By.CSS_SELECTOR, '#results li').text}")
    finally:
        driver.quit()
        server.send_signal(signal.SIGINT)
        server.wait(60)


if __name__ == "__main__":
    main()
