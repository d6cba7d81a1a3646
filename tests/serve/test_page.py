"""The server's pages (hltmt_plugin/serve/page.py): the API's page names every route; the page at
``/`` works in a real browser (Debian's Chromium, headless, driven by Selenium through Debian's
chromedriver; never a browser fetched at run time): the model's directions to pick from,
sentences typed, the translations, their n-best and the pool module that served each, the same as
the API answers. With HLTMT_SCREENSHOT=FILE the test also saves the page there (docs/serving.md's
picture)."""

import json
import os
import re

import pytest

from hltmt_plugin.serve import api, page

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.mark.fast
def test_the_api_page_shows_every_route_and_its_schemas():
    document = api.openapi("9.9")
    text = page.api_page(document)
    for path, methods in document["paths"].items():
        for method in methods:
            assert f"<code>{method.upper()} {path}</code>" in text
    assert "hltmt-serve 9.9" in text and "&quot;translatedText&quot;" in text


@pytest.mark.fast
def test_the_page_loads_nothing_from_elsewhere():
    assert not re.search(r"(src|href)=|https?://|@import", page.PAGE)
    for route in ('"/languages"', '"/health"', '"/v1/translate"'):
        assert route in page.PAGE


@pytest.fixture(scope="module")
def browser():
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(path)]
    if missing:
        pytest.skip(
            f"{' and '.join(missing)} not installed: Debian's chromium and chromium-driver "
            "(bash scripts/setup.sh installs them as root; else apt-get install chromium chromium-driver)"
        )
    os.environ["SE_OFFLINE"] = "true"  # Selenium never looks for a driver or browser to download
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1000,900"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def test_the_page_translates_in_chromium_with_the_n_best_and_the_pool_module(browser):
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from serve_common import load_translator, post, running

    lines = ["The file could not be opened.", "Save the document before closing."]
    with running(load_translator()) as port:
        browser.get(f"http://127.0.0.1:{port}/")
        wait = WebDriverWait(browser, 30)
        wait.until(lambda d: len(Select(d.find_element("id", "target")).options) == 10)
        assert "10 directions, beam 4" in browser.find_element("id", "model").text
        assert Select(browser.find_element("id", "target")).options[0].text == "French (fr)"
        Select(browser.find_element("id", "target")).select_by_value("de")
        browser.find_element("id", "text").send_keys("\n".join(lines))
        nbest = browser.find_element("id", "nbest")
        nbest.clear()
        nbest.send_keys("2")
        browser.find_element("id", "translate").click()
        wait.until(lambda d: len(d.find_elements("css selector", ".result")) == 2)
        _, expected = post(
            port, "/v1/translate", {"items": [{"source": "en", "target": "de", "text": t} for t in lines], "nbest": 2}
        )
        results = browser.find_elements("css selector", ".result")
        for box, want in zip(results, expected["results"]):
            assert box.find_element("css selector", ".translation").text == want["translation"]
            assert box.find_element("css selector", ".routing").text == "served by pool module m0"
            shown = [li.text for li in box.find_elements("css selector", ".hypotheses li")]
            assert [s.rsplit(" score ", 1)[0] for s in shown] == [h["translation"] for h in want["hypotheses"]]
        assert "2 sentence(s) in" in browser.find_element("id", "status").text
        if os.environ.get("HLTMT_SCREENSHOT"):
            browser.save_screenshot(os.environ["HLTMT_SCREENSHOT"])
        assert json.loads(browser.execute_script("return JSON.stringify(languages.map(l => l.code))")) == ["en"]
