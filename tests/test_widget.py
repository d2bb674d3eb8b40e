"""The similar-questions widget in headless Chromium (Debian's chromium and chromium-driver),
against a real `qres serve`. Without the browser these tests skip, saying how to install it;
CI installs it and sets QRES_REQUIRE_BROWSER=1, which makes a missing browser a failure."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.serving import ROOT, Server, build_demo_index

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
INSTALL = "apt-get install chromium chromium-driver"
REQUIRE = "QRES_REQUIRE_BROWSER"
# The README's picture; rewritten only on request (QRES_UPDATE_SCREENSHOT=1 pytest ...).
README_SCREENSHOT = ROOT / "docs" / "widget.png"
# Answer counts given to three of the USB questions (the demo corpus has none).
ANSWERS = {"d128": {"answer_count": 3}, "d251": {"answer_count": 1}, "d270": {"answer_count": 0}}
SHOWN = {3: "3 answers", 1: "1 answer", 0: "0 answers"}


def need_browser() -> None:
    """Skip (fail where QRES_REQUIRE_BROWSER is set) without the system's headless browser."""
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return
    missing = f"no headless browser ({CHROMEDRIVER} or {CHROMIUM} missing): {INSTALL}, as root"
    if os.environ.get(REQUIRE):
        pytest.fail(f"{missing} ({REQUIRE} is set, as in CI)")
    pytest.skip(f"the widget's browser tests: {missing}")


@pytest.fixture(scope="module")
def browser():
    need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as DriverService

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)  # never selenium-manager, never a download
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.add_argument("--window-size=900,620")
    # No network but this machine: a page that needs a CDN or any other host fails here.
    options.add_argument("--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console, failed loads
    driver = webdriver.Chrome(options=options, service=DriverService(str(CHROMEDRIVER)))
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    index = build_demo_index(tmp_path_factory.mktemp("widget") / "index", extras=ANSWERS)
    log = tmp_path_factory.mktemp("widget-log") / "server.log"
    running = Server(index, log=log)
    # The forum's own question pages (here a path the service does not serve, as on a forum).
    running.args = ("--question-url", f"{running.url}/forum/q/{{id}}")
    running.start()
    yield running
    running.stop()


def wait_for(browser, condition, timeout=20):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout, poll_frequency=0.1).until(lambda _: condition())


def widget_state(browser) -> str:
    return browser.find_element("css selector", ".qres-similar").get_attribute("data-state")


def options(browser):
    return browser.find_elements("css selector", ".qres-similar [role=option]")


def title_of(option) -> str:
    return option.find_element("css selector", "a").text


def answers_of(option) -> str | None:
    shown = option.find_elements("css selector", ".qres-answers")
    return shown[0].text if shown else None


def test_typing_a_title_lists_the_duplicate_and_keys_move_through_it(browser, server, tmp_path):
    from selenium.webdriver.common.keys import Keys

    browser.get(server.url + "/")
    title = browser.find_element("id", "title")
    assert title.get_attribute("role") == "combobox"
    assert title.get_attribute("aria-expanded") == "false"
    title.send_keys("how do i boot from a usb stick")
    wait_for(browser, lambda: widget_state(browser) == "results")
    shown = options(browser)
    assert "How do I boot Ubuntu from a USB stick?" in [title_of(o) for o in shown]
    # the answer count beside the title where the index holds it, nothing where it does not
    counts = {o.get_attribute("data-id"): answers_of(o) for o in shown}
    want = {q: SHOWN[ANSWERS[q]["answer_count"]] if q in ANSWERS else None for q in counts}
    assert counts == want
    assert counts["d128"] == "3 answers" and None in counts.values()
    assert title.get_attribute("aria-expanded") == "true"
    listbox = browser.find_element("id", title.get_attribute("aria-controls"))
    assert listbox.get_attribute("role") == "listbox"
    status = browser.find_element("css selector", ".qres-similar [role=status]")
    assert "similar question" in status.text

    title.send_keys(Keys.ARROW_DOWN)
    title.send_keys(Keys.ARROW_DOWN)
    second = options(browser)[1]
    assert second.get_attribute("aria-selected") == "true"
    assert title.get_attribute("aria-activedescendant") == second.get_attribute("id")
    title.send_keys(Keys.ARROW_UP)
    assert options(browser)[0].get_attribute("aria-selected") == "true"

    screenshot = tmp_path / "widget.png"
    browser.save_screenshot(str(screenshot))
    assert screenshot.stat().st_size < 200_000
    if os.environ.get("QRES_UPDATE_SCREENSHOT"):
        README_SCREENSHOT.parent.mkdir(exist_ok=True)
        README_SCREENSHOT.write_bytes(screenshot.read_bytes())

    title.send_keys(Keys.ENTER)  # follows the first question's link: the forum's page
    wait_for(browser, lambda: "/forum/q/" in browser.current_url)
    assert browser.current_url == f"{server.url}/forum/q/d128"


def test_the_demo_page_loads_without_a_failed_request(browser, server):
    browser.get_log("browser")  # what earlier pages logged
    browser.get(server.url + "/")
    browser.find_element("id", "title").send_keys("wifi keeps dropping")
    wait_for(browser, lambda: widget_state(browser) == "results")
    errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors  # a missing /favicon.ico was one


def test_a_click_on_a_suggestion_opens_the_operators_question_url(browser, server):
    browser.get(server.url + "/")
    browser.find_element("id", "title").send_keys("wifi keeps dropping")
    wait_for(browser, lambda: widget_state(browser) == "results")
    first = options(browser)[0]
    link = first.find_element("css selector", "a").get_attribute("href")
    assert link.startswith(f"{server.url}/forum/q/")
    first.click()
    wait_for(browser, lambda: browser.current_url == link)


def test_choosing_a_suggestion_tells_the_page_its_id_and_title(browser, server):
    from selenium.webdriver.common.keys import Keys

    browser.get(server.url + "/")
    browser.execute_script(
        "document.getElementById('title').addEventListener('qres:select', function (e) {"
        "  e.preventDefault(); window.chosen = e.detail; });"
    )
    title = browser.find_element("id", "title")
    title.send_keys("how do i boot from a usb stick")
    wait_for(browser, lambda: widget_state(browser) == "results")
    first = options(browser)[0]
    assert answers_of(first) == "3 answers"
    title.send_keys(Keys.ARROW_DOWN, Keys.ENTER)
    chosen = wait_for(browser, lambda: browser.execute_script("return window.chosen"))
    # the title alone, never the answer count shown beside it
    assert chosen == {"id": "d128", "title": "How do I boot Ubuntu from a USB stick?"}
    assert browser.current_url == server.url + "/"  # the page prevented the default


def test_the_api_docs_render_with_no_network(browser, server):
    from selenium.common.exceptions import WebDriverException

    with pytest.raises(WebDriverException, match="ERR_NAME_NOT_RESOLVED"):
        browser.get("https://cdn.jsdelivr.net/")  # the rules hold: no host outside resolves
    browser.get(server.url + "/docs")
    wait_for(browser, lambda: browser.find_elements("css selector", ".swagger-ui .info .title"))
    assert "qres" in browser.find_element("css selector", ".swagger-ui .info .title").text
    paths = [e.text for e in browser.find_elements("css selector", ".opblock-summary-path")]
    assert "/search" in paths and "/questions/{qid}" in paths


def test_only_the_latest_text_is_shown_and_no_match_is_said_quietly(browser, server):
    browser.get(server.url + "/")
    title = browser.find_element("id", "title")
    title.send_keys("wifi")
    title.send_keys(" driver missing broadcom")  # the earlier search is debounced or aborted
    wait_for(browser, lambda: widget_state(browser) == "results")
    assert any("roadcom" in o.text or "wifi" in o.text.lower() for o in options(browser))
    title.clear()
    title.send_keys("zzqx vvqk")  # words no question has
    wait_for(browser, lambda: widget_state(browser) == "empty")
    assert options(browser) == []
    assert "No similar questions" in browser.find_element("css selector", ".qres-status").text
    title.clear()
    title.send_keys("x")  # too short: the panel goes away
    title.send_keys("\b")
    wait_for(browser, lambda: widget_state(browser) == "idle")


SLOW_FETCH = """
window.requested = []; window.aborted = 0;
const realFetch = window.fetch;
window.fetch = (url, options) => new Promise((resolve, reject) => {
  window.requested.push(String(url));
  options.signal.addEventListener("abort", () => {
    window.aborted += 1;
    reject(new DOMException("aborted", "AbortError"));
  });
  setTimeout(() => realFetch(url, options).then(resolve, reject), 1500);
});
"""


def test_a_newer_text_cancels_the_search_in_flight(browser, server):
    import time

    browser.get(server.url + "/")
    browser.execute_script(SLOW_FETCH)  # every answer takes 1.5 s: the first is still pending
    title = browser.find_element("id", "title")
    title.send_keys("wifi driver")
    wait_for(browser, lambda: browser.execute_script("return window.requested.length") == 1)
    time.sleep(0.1)
    title.send_keys(" broadcom")
    wait_for(browser, lambda: widget_state(browser) == "results")
    requested = browser.execute_script("return window.requested")
    assert len(requested) == 2 and "broadcom" in requested[1]
    assert browser.execute_script("return window.aborted") == 1
    assert browser.find_element("css selector", ".qres-similar").get_attribute("aria-busy") is None


RECORD_FETCH = """
window.requested = [];
const realFetch = window.fetch;
window.fetch = (url, options) => {
  window.requested.push(String(url));
  return realFetch(url, options);
};
"""


def test_a_word_still_being_typed_is_sent_to_be_completed_and_a_finished_one_is_not(
    browser, server
):
    from urllib.parse import parse_qs, urlsplit

    browser.get(server.url + "/")
    browser.execute_script(RECORD_FETCH)
    title = browser.find_element("id", "title")
    title.send_keys("how do i boot from a us")  # paused mid-word
    wait_for(browser, lambda: widget_state(browser) == "results")
    assert "How do I boot Ubuntu from a USB stick?" in [title_of(o) for o in options(browser)]
    title.send_keys("b stick ")  # a finished word: a space after it
    wait_for(browser, lambda: browser.execute_script("return window.requested.length") == 2)
    asked = [parse_qs(urlsplit(u).query) for u in browser.execute_script("return window.requested")]
    assert asked[0]["q"] == ["how do i boot from a us"] and asked[0]["typing"] == ["true"]
    assert asked[1]["q"] == ["how do i boot from a usb stick"] and "typing" not in asked[1]


def test_a_service_that_is_down_shows_a_clear_error(browser, server, tmp_path):
    browser.get(server.url + "/")
    server.stop()
    try:
        title = browser.find_element("id", "title")
        title.send_keys("sound over hdmi does not work")
        wait_for(browser, lambda: widget_state(browser) == "error")
        status = browser.find_element("css selector", ".qres-similar [role=status]")
        assert "unavailable" in status.text and "not answering" in status.text
        assert options(browser) == []
        browser.save_screenshot(str(tmp_path / "down.png"))  # kept for a failing run's eyes
    finally:
        server.start()


def test_going_back_to_the_text_on_screen_drops_the_answer_for_the_newer_one(browser, server):
    import time

    browser.get(server.url + "/")
    title = browser.find_element("id", "title")
    title.send_keys("wifi driver")
    wait_for(browser, lambda: widget_state(browser) == "results")
    shown = [o.get_attribute("data-id") for o in options(browser)]
    browser.execute_script(SLOW_FETCH)  # from here every answer takes 1.5 s
    title.send_keys(" sound hdmi")
    wait_for(browser, lambda: browser.execute_script("return window.requested.length") == 1)
    for _ in " sound hdmi":
        title.send_keys("\b")  # back to the text whose answer is on screen
    time.sleep(2.5)  # past the slow answer
    assert [o.get_attribute("data-id") for o in options(browser)] == shown
    assert browser.execute_script("return window.aborted") == 1


def test_escape_closes_the_list_even_with_a_search_under_way(browser, server):
    import time

    from selenium.webdriver.common.keys import Keys

    browser.get(server.url + "/")
    title = browser.find_element("id", "title")
    title.send_keys("wifi driver")
    wait_for(browser, lambda: widget_state(browser) == "results")
    browser.execute_script(SLOW_FETCH)
    title.send_keys(" broadcom")
    wait_for(browser, lambda: browser.execute_script("return window.requested.length") == 1)
    title.send_keys(Keys.ESCAPE)
    title.send_keys(" b", Keys.ESCAPE)  # and inside the pause before a search
    time.sleep(2.0)
    assert widget_state(browser) == "idle" and options(browser) == []
    assert title.get_attribute("aria-expanded") == "false"


def test_a_right_or_modified_click_leaves_the_page_to_the_browser(browser, server):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    browser.get(server.url + "/")
    title = browser.find_element("id", "title")
    title.send_keys("wifi keeps dropping")
    wait_for(browser, lambda: widget_state(browser) == "results")
    first = options(browser)[0]
    ActionChains(browser).context_click(first).perform()
    ActionChains(browser).key_down(Keys.CONTROL).click(first).key_up(Keys.CONTROL).perform()
    assert browser.current_url == server.url + "/"  # the question being written stays
    assert title.get_attribute("value") == "wifi keeps dropping"


def test_leaving_the_box_closes_the_combobox_and_keeps_the_list_in_view(browser, server):
    from selenium.webdriver.common.keys import Keys

    browser.get(server.url + "/")
    title = browser.find_element("id", "title")
    title.send_keys("wifi keeps dropping", Keys.ARROW_DOWN)
    wait_for(browser, lambda: widget_state(browser) == "results")
    title.send_keys(Keys.ARROW_DOWN)
    title.send_keys(Keys.TAB)
    assert title.get_attribute("aria-expanded") == "false"
    assert title.get_attribute("aria-activedescendant") is None
    assert all(o.get_attribute("aria-selected") == "false" for o in options(browser))
    assert options(browser)[0].is_displayed()  # the list stays beside the question
    title.click()
    assert title.get_attribute("aria-expanded") == "true"


ANSWER_FETCH = """
window.requested = [];
window.fetch = (url, options) => {
  window.requested.push(String(url));
  return Promise.resolve(new Response(JSON.stringify({results: arguments_results}),
    {status: 200, headers: {"Content-Type": "application/json"}}));
};
"""


def test_a_title_cannot_reorder_the_list_or_widen_the_page(browser, server):
    results = [
        {"id": "r1", "title": "wifi \u202eevil title exe.txt", "answer_count": 3},
        {"id": "r2", "title": "x" * 2000},
    ]
    import json

    browser.get(server.url + "/")
    browser.execute_script(ANSWER_FETCH.replace("arguments_results", json.dumps(results)))
    browser.find_element("id", "title").send_keys("wifi")
    wait_for(browser, lambda: widget_state(browser) == "results")
    bidi, long = options(browser)
    assert bidi.find_element("css selector", "bdi").text.startswith("wifi")  # isolated
    assert bidi.text.endswith("3 answers")
    width = browser.execute_script("return document.documentElement.scrollWidth")
    assert width <= browser.execute_script("return window.innerWidth")  # wrapped, not wide
    assert long.size["height"] < 100  # at most three lines of it


def test_a_pasted_text_too_long_for_the_service_is_cut_not_refused(browser, server):
    from urllib.parse import parse_qs, urlsplit

    browser.get(server.url + "/")
    browser.execute_script(RECORD_FETCH)
    title = browser.find_element("id", "title")
    browser.execute_script(
        "arguments[0].value = 'wifi ' + 'driver '.repeat(300);"
        "arguments[0].dispatchEvent(new Event('input'));",
        title,
    )
    wait_for(browser, lambda: widget_state(browser) in ("results", "empty", "error"))
    assert widget_state(browser) != "error"
    (asked,) = browser.execute_script("return window.requested")
    assert len(parse_qs(urlsplit(asked).query)["q"][0]) == 2000


def test_a_widget_loaded_from_a_folder_asks_that_folder(browser, tmp_path):
    import functools
    import http.server
    import shutil
    import threading

    (tmp_path / "qres").mkdir()
    shutil.copy(ROOT / "qres" / "static" / "widget.js", tmp_path / "qres" / "widget.js")
    (tmp_path / "page.html").write_text(
        '<!doctype html><input id="t" data-qres-similar><script src="/qres/widget.js"></script>'
    )
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{site.server_address[1]}"
        browser.get(base + "/page.html")
        browser.execute_script(RECORD_FETCH)
        browser.find_element("id", "t").send_keys("wifi drops")
        wait_for(browser, lambda: browser.execute_script("return window.requested.length"))
        (asked,) = browser.execute_script("return window.requested")
        assert asked.startswith(base + "/qres/search?")  # as behind a proxy's /qres/
    finally:
        site.shutdown()
