"""The page in a real browser: headless Chromium (Debian's ``chromium`` and ``chromium-driver``,
which ``.ci/run`` installs) driven by selenium against a live ``transduce serve``.

It types a sentence, translates with the button and with Ctrl+Enter, and finds the translation,
the heatmap and the hover highlight; a screenshot is saved in the test's folder. In CI (``CI`` set)
a missing browser fails the test; elsewhere it is skipped with what to install.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.request

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


def browser():
    missing = [
        name for name, path in (("chromium", CHROMIUM), ("chromium-driver", DRIVER)) if path is None
    ]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip install -e '.[dev]')")
    if missing:
        message = (
            f"the browser test needs {', '.join(missing)} "
            "(Debian: apt-get install chromium chromium-driver)"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1280,1000", "--lang=en-US"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)


def api_translation(url: str, sentence: str) -> str:
    request = urllib.request.Request(
        url + "/v1/translate",
        json.dumps({"text": [sentence]}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.load(answer)["translations"][0]


def test_the_page_translates_and_shows_attention(served_run, start_server, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    driver = browser()
    server = start_server(served_run)
    try:
        wait = WebDriverWait(driver, 60)
        driver.get(server.url + "/")
        wait.until(ready.text_to_be_present_in_element((By.ID, "model-meta"), "English (en) → "
                                                                              "German (de)"))
        assert driver.find_element(By.ID, "source-label").text == "Source: English (en)"
        assert driver.find_element(By.ID, "target-label").text == "Translation: German (de)"
        source = driver.find_element(By.ID, "source")
        assert source.get_attribute("id") == driver.find_element(
            By.CSS_SELECTOR, "label[for=source]"
        ).get_attribute("for")  # the text box has its label
        source.clear()
        source.send_keys("the big dog sees a red cat")
        driver.find_element(By.ID, "translate").click()
        wait.until(ready.presence_of_element_located((By.CSS_SELECTOR, "#results li button")))
        shown = driver.find_element(By.CSS_SELECTOR, "#results li button").text
        assert shown == api_translation(server.url, "the big dog sees a red cat")
        assert "translated in" in driver.find_element(By.ID, "status").text
        # the heatmap: a row per target piece (and </s>), a column per source piece (and </s>)
        heatmap = driver.find_element(By.ID, "heatmap")
        assert heatmap.is_displayed()
        rows = heatmap.find_elements(By.CSS_SELECTOR, "tbody tr")
        columns = heatmap.find_elements(By.CSS_SELECTOR, "thead th")
        target_pieces = driver.find_elements(By.CSS_SELECTOR, "#target-strip .piece")
        source_pieces = driver.find_elements(By.CSS_SELECTOR, "#source-strip .piece")
        assert len(rows) == len(target_pieces) >= 2 and len(columns) == len(source_pieces) >= 2
        assert all(len(r.find_elements(By.TAG_NAME, "td")) == len(columns) for r in rows)
        assert [p.text for p in source_pieces][-1] == "</s>"
        # hovering a target piece lights up the source pieces it attends to
        assert all(not p.get_attribute("style") for p in source_pieces)
        ActionChains(driver).move_to_element(target_pieces[0]).perform()
        assert "active" in target_pieces[0].get_attribute("class")
        assert all("background" in p.get_attribute("style") for p in source_pieces)
        # tiny: 2 layers
        assert len(driver.find_element(By.ID, "layer").find_elements(By.TAG_NAME, "option")) == 2
        driver.save_screenshot(str(tmp_path / "page.png"))
        assert (tmp_path / "page.png").stat().st_size > 10_000
        # the keyboard: Ctrl+Enter in the text box translates two lines, each shown as it is done (a
        # stream)
        source.clear()
        source.send_keys("a small house", Keys.SHIFT, Keys.ENTER, Keys.SHIFT, "the cat sat")
        source.send_keys(Keys.CONTROL, Keys.ENTER)
        wait.until(ready.text_to_be_present_in_element((By.ID, "status"), "the first line after"))
        shown = [b.text for b in driver.find_elements(By.CSS_SELECTOR, "#results li button")]
        assert shown == [api_translation(server.url, s) for s in ("a small house", "the cat sat")]
        assert all(b.is_enabled() for b in driver.find_elements(By.CSS_SELECTOR, "#results li "
                                                                                 "button"))
        # a request the server refuses shows its message
        driver.execute_script("document.getElementById('beam').value = 99")
        driver.find_element(By.ID, "translate").click()
        wait.until(ready.text_to_be_present_in_element((By.ID, "error"), "beam 99"))
        driver.save_screenshot(str(tmp_path / "error.png"))
    finally:
        driver.quit()


def api_post(url: str, route: str, body: bytes, kind: str) -> dict:
    request = urllib.request.Request(url + route, body, method="POST",
                                     headers={"Content-Type": kind})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.load(answer)


def test_each_task_s_page_shows_its_answer(task_runs, start_server, tmp_path):
    """The parse page draws the tree, the classify page the classes over the image and its
    rollout, the transcribe page the transcript: each what the task's route answers."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    driver = browser()
    try:
        wait = WebDriverWait(driver, 60)
        # parsing: the tree's leaves are the sentence's words, its brackets the route's tree
        server = start_server(task_runs / "parse")
        driver.get(server.url + "/")
        wait.until(ready.text_to_be_present_in_element((By.ID, "model-meta"), "a parser"))
        sentence = "mice express normal genes"
        box = driver.find_element(By.ID, "sentences")
        box.clear()
        box.send_keys(sentence)
        driver.find_element(By.ID, "parse").click()
        wait.until(ready.presence_of_element_located((By.CSS_SELECTOR, "#results ul.tree")))
        tree = api_post(server.url, "/v1/parse", json.dumps({"text": [sentence]}).encode(),
                        "application/json")["trees"][0]
        assert driver.find_element(By.CSS_SELECTOR, "#results .bracketed").text == tree
        leaves = driver.find_elements(By.CSS_SELECTOR, "#results ul.tree .word")
        assert [leaf.text for leaf in leaves] == sentence.split()
        driver.save_screenshot(str(tmp_path / "parse.png"))
        # classification: the classes the route gives, the rollout over the image
        server = start_server(task_runs / "classify")
        driver.get(server.url + "/")
        wait.until(ready.text_to_be_present_in_element((By.ID, "model-meta"), "3 classes"))
        image = task_runs / "images" / "down" / "0.png"
        driver.find_element(By.ID, "image").send_keys(str(image))
        driver.find_element(By.ID, "classify").click()
        wait.until(ready.text_to_be_present_in_element((By.ID, "status"), "classified in"))
        answer = api_post(server.url, "/v1/classify?rollout=true", image.read_bytes(),
                          "image/png")
        shown = [item.text for item in driver.find_elements(By.CSS_SELECTOR, "#classes li")]
        assert [line.split(" ")[0] for line in shown] == [c["label"] for c in answer["classes"]]
        assert driver.find_element(By.ID, "preview").is_displayed()
        assert driver.find_element(By.ID, "rollout").get_attribute("width") == str(
            len(answer["rollout"]))
        driver.save_screenshot(str(tmp_path / "classify.png"))
        (tmp_path / "notes.png").write_bytes(b"not an image")
        driver.find_element(By.ID, "image").send_keys(str(tmp_path / "notes.png"))
        driver.find_element(By.ID, "classify").click()
        wait.until(ready.text_to_be_present_in_element((By.ID, "error"), "not a readable image"))
        # speech: the transcript the route gives
        server = start_server(task_runs / "transcribe")
        driver.get(server.url + "/")
        wait.until(ready.text_to_be_present_in_element((By.ID, "model-meta"), "a speech model"))
        recording = task_runs / "table" / "0.flac"
        driver.find_element(By.ID, "recording").send_keys(str(recording))
        driver.find_element(By.ID, "transcribe").click()
        wait.until(ready.text_to_be_present_in_element((By.ID, "status"), "transcribed in"))
        text = api_post(server.url, "/v1/transcribe", recording.read_bytes(), "audio/flac")["text"]
        assert driver.find_element(By.ID, "transcript").text == text.strip()
        driver.save_screenshot(str(tmp_path / "transcribe.png"))
    finally:
        driver.quit()
