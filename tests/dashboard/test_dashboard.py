"""The dashboard of `postbox dashboard` in headless Chromium (run by .ci/dashboard.sh).

Each test serves a fresh demo store (queues orders, emails with 2 dead letters, audit) with
`postbox --json dashboard STORE --bind 127.0.0.1:0 --allow-actions` and drives the page with
Selenium. The page rebuilds its tables every second, so tables are read in one piece with a
script and every wait is on a condition, polled. Chromium resolves the names rebind.test and
evil.test to 127.0.0.1 (--host-resolver-rules), as an attacker's DNS would: pages from them
are the DNS-rebinding and cross-site pages the endpoint must refuse.

Environment: POSTBOX_BIN (the postbox binary; default target/debug/postbox), POSTBOX_SCREENSHOT
(where the screenshot test writes its PNG; default: the test's tmp_path), POSTBOX_CHROMIUM and
POSTBOX_CHROMEDRIVER (default: Debian's /usr/bin/chromium and /usr/bin/chromedriver).
"""

from __future__ import annotations

import http.server
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families
from selenium import webdriver
from selenium.common.exceptions import (
    NoAlertPresentException,
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

ROOT = Path(__file__).resolve().parents[2]
POSTBOX = os.environ.get("POSTBOX_BIN") or str(ROOT / "target" / "debug" / "postbox")
CHROMIUM = os.environ.get("POSTBOX_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("POSTBOX_CHROMEDRIVER", "/usr/bin/chromedriver")
WAIT = 10.0  # seconds any condition may take (the page polls once a second)

# The queue table's columns and the `postbox --json queues` count each one shows.
COLUMNS = {
    "active": "active",
    "locked": "locked",
    "scheduled": "scheduled",
    "deferred": "deferred",
    "dead": "dead_lettered",
}

# Reads the whole queue table at once: {queue: {cell class: text}}.
QUEUE_TABLE_JS = """
const out = {};
for (const tr of document.querySelectorAll('#queues tbody tr[data-queue]')) {
  const row = {};
  for (const td of tr.cells) row[td.classList[0]] = td.textContent;
  out[tr.dataset.queue] = row;
}
return out;
"""

# The store's figures: {name: value shown}.
STORE_STATS_JS = """
const out = {};
for (const d of document.querySelectorAll('#store-stats [data-stat]')) {
  out[d.dataset.stat] = d.querySelector('b').textContent;
}
return out;
"""

# The labels of the store's figures: {name: label shown}.
STORE_LABELS_JS = """
const out = {};
for (const d of document.querySelectorAll('#store-stats [data-stat]')) {
  out[d.dataset.stat] = d.querySelector('span').textContent;
}
return out;
"""

# The dead-letter table's rows: [{id, enabled}] (enabled: its resubmit button can be clicked).
DEAD_LETTERS_JS = """
return [...document.querySelectorAll('#dead-letters tbody tr[data-id]')].map((tr) => {
  const b = tr.querySelector('button.resubmit');
  return { id: tr.dataset.id, enabled: !!b && !b.disabled };
});
"""


def postbox(*args: str) -> str:
    done = subprocess.run(
        [POSTBOX, *args], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, f"postbox {' '.join(args)}: {done.returncode}\n{done.stderr}"
    return done.stdout


def counts(store: Path) -> dict[str, dict[str, int]]:
    doc = json.loads(postbox("--json", "queues", str(store)))
    return {q["name"]: q["counts"] for q in doc["queues"]}


@dataclass
class Dashboard:
    store: Path
    url: str
    page: str
    metrics: str
    token: str

    def admin(self, *args: str) -> str:
        """Runs a command in the dashboard's own process (its sends count in its rates)."""
        return postbox("--admin", self.url, "--token", self.token, *args)


@pytest.fixture
def dashboard(tmp_path: Path):
    store = tmp_path / "shop.postbox"
    postbox("demo", str(store))
    out, err = tmp_path / "dashboard.out", tmp_path / "dashboard.err"
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen(
            [POSTBOX, "--json", "dashboard", store.name, "--bind", "127.0.0.1:0", "--allow-actions"],
            stdout=o,
            stderr=e,
            stdin=subprocess.DEVNULL,
            cwd=tmp_path,  # STORE relative: the page's header shows just its name
        )
    try:
        deadline = time.monotonic() + WAIT
        while not out.read_text().endswith("\n"):
            assert proc.poll() is None, f"dashboard exited with {proc.returncode}: {err.read_text()}"
            assert time.monotonic() < deadline, "dashboard printed no address in 10 s"
            time.sleep(0.05)
        first = json.loads(out.read_text().splitlines()[0])
        assert first["url"].startswith("http://127.0.0.1:") and first["url"].endswith("/")
        assert first["metrics"] == first["url"] + "metrics"
        assert re.fullmatch(r"[0-9a-f]{32}", first["token"])
        assert first["page"] == first["url"] + "#token=" + first["token"]
        assert first["actions"] is True
        yield Dashboard(store, first["url"], first["page"], first["metrics"], first["token"])
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail("the dashboard did not stop within 10 s of SIGINT")
    assert code == 0, f"the dashboard exited with {code} after SIGINT: {err.read_text()}"


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        "--lang=en-US",
        "--host-resolver-rules=MAP rebind.test 127.0.0.1, MAP evil.test 127.0.0.1",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def wait(driver: WebDriver, condition: Callable[[WebDriver], Any], what: str) -> Any:
    """Polls `condition` until it returns something truthy (which it returns); fails after WAIT."""
    return WebDriverWait(
        driver,
        WAIT,
        poll_frequency=0.1,
        ignored_exceptions=(StaleElementReferenceException, NoSuchElementException),
    ).until(condition, f"waited {WAIT:.0f} s for {what}")


def status(driver: WebDriver) -> str:
    return driver.find_element(By.ID, "status").text


def queue_table(driver: WebDriver) -> dict[str, dict[str, str]]:
    return driver.execute_script(QUEUE_TABLE_JS)


def open_page(driver: WebDriver, d: Dashboard, fragment: str = "") -> None:
    driver.get(d.url + fragment)
    wait(driver, lambda dr: status(dr).startswith("updated "), "the first poll")
    assert re.fullmatch(r"updated \d{1,2}:\d{2}:\d{2}( [AP]M)?", status(driver)), status(driver)


def choose_dead_letter_queue(driver: WebDriver, queue: str) -> list[dict[str, Any]]:
    """Selects `queue` in the dead-letter browser; returns its rows once they are listed."""
    Select(driver.find_element(By.ID, "dlq-queue")).select_by_value(queue)
    return wait(driver, lambda dr: driver.execute_script(DEAD_LETTERS_JS), f"{queue}'s dead letters")


def click_resubmit(driver: WebDriver, message_id: str) -> None:
    def click(dr: WebDriver) -> bool:
        button = dr.find_element(
            By.CSS_SELECTOR, f'#dead-letters tbody tr[data-id="{message_id}"] button.resubmit'
        )
        if not button.is_enabled():
            return False
        button.click()  # a table rebuilt meanwhile raises StaleElement before clicking: retried
        return True

    wait(driver, click, f"the resubmit button of dead letter {message_id}")


def test_page_loads_with_the_counts_of_every_queue(browser: WebDriver, dashboard: Dashboard):
    open_page(browser, dashboard, f"#token={dashboard.token}")
    assert browser.title == "postbox dashboard"
    want = counts(dashboard.store)
    assert sorted(want) == ["audit", "emails", "orders"]
    table = queue_table(browser)
    assert sorted(table) == sorted(want)
    for name, c in want.items():
        for cls, key in COLUMNS.items():
            assert table[name][cls] == str(c[key]), (name, cls, table[name], c)
    assert want["emails"]["dead_lettered"] == 2 and want["orders"]["active"] == 4
    # Only emails has dead letters: its dead cell is highlighted, the others are not.
    assert browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="emails"] td.dead.nonzero')
    assert not browser.find_elements(By.CSS_SELECTOR, 'tr[data-queue="orders"] td.dead.nonzero')
    path = browser.find_element(By.ID, "store-path").text
    assert path == f"{dashboard.store.name} (multi-process)"
    stats = browser.execute_script(STORE_STATS_JS)
    assert set(stats) >= {"commits", "operations", "operations per commit", "queues"}, stats
    assert stats["queues"] == "3" and int(stats["commits"]) >= 0
    for chart in ("chart-counts", "chart-rates"):
        assert browser.find_element(By.ID, chart).size["height"] > 100
    # The dead-letter browser starts on the queue that has some, and lists them.
    assert Select(browser.find_element(By.ID, "dlq-queue")).first_selected_option.text == "emails"
    assert len(wait(browser, lambda dr: dr.execute_script(DEAD_LETTERS_JS), "dead letters")) == 2


def test_counts_follow_a_send_from_another_process(browser: WebDriver, dashboard: Dashboard):
    open_page(browser, dashboard)
    before = int(queue_table(browser)["orders"]["active"])
    assert before == counts(dashboard.store)["orders"]["active"]
    postbox("send", str(dashboard.store), "orders", "hello")
    wait(
        browser,
        lambda dr: queue_table(dr)["orders"]["active"] == str(before + 1),
        f"orders' active count to show {before + 1}",
    )


def test_the_change_shows_sends_of_another_process(browser: WebDriver, dashboard: Dashboard):
    """Sends by another process show in the change per second (from the store's counts), not
    in the sends of the dashboard's own process."""
    open_page(browser, dashboard)
    stop = threading.Event()

    def load() -> None:
        # Pacing the load generator (not waiting for the page): 8 sends a second, for as long
        # as the page has not shown them, at most 10 s.
        start = time.monotonic()
        for i in range(80):
            if stop.is_set():
                return
            postbox("send", str(dashboard.store), "orders", json.dumps({"order": 500 + i}))
            time.sleep(max(0.0, start + (i + 1) / 8 - time.monotonic()))

    sender = threading.Thread(target=load)
    sender.start()
    try:
        row = wait(
            browser,
            lambda dr: (r := queue_table(dr)["orders"])["change"].startswith("+") and r,
            "orders' change per second to go up",
        )
    finally:
        stop.set()
        sender.join()
    assert float(row["change"]) > 0 and row["sends"] == "0.0", row
    labels = browser.execute_script(STORE_LABELS_JS)
    assert labels["commits"] == "commits by this process", labels
    assert labels["change per second"] == "change of messages held per second", labels
    note = browser.find_element(By.ID, "rates-note").text
    assert "every process" in note and "other processes' sends and completions are not in them" in note


def test_resubmit_moves_a_dead_letter_back(browser: WebDriver, dashboard: Dashboard):
    before = counts(dashboard.store)["emails"]
    browser.get(dashboard.page)  # the URL `postbox dashboard` prints
    wait(browser, lambda dr: status(dr).startswith("updated "), "the first poll")
    assert browser.find_element(By.ID, "token").get_attribute("value") == dashboard.token
    # The token leaves the address bar (it stays in this tab's session storage).
    assert browser.current_url == dashboard.url
    rows = choose_dead_letter_queue(browser, "emails")
    assert len(rows) == before["dead_lettered"] == 2
    first = rows[0]["id"]
    click_resubmit(browser, first)
    wait(
        browser,
        lambda dr: status(dr) == f"resubmitted {first}"
        and first not in [r["id"] for r in dr.execute_script(DEAD_LETTERS_JS)]
        and queue_table(dr)["emails"]["dead"] == str(before["dead_lettered"] - 1),
        f"dead letter {first} to leave the table and emails' dead count to drop",
    )
    after = counts(dashboard.store)["emails"]
    assert after["dead_lettered"] == before["dead_lettered"] - 1
    assert after["active"] == before["active"] + 1
    assert len(browser.execute_script(DEAD_LETTERS_JS)) == 1


def dead_letter_note(driver: WebDriver) -> str:
    return driver.find_element(By.ID, "dlq-empty").text


def enter_token(driver: WebDriver, text: str) -> None:
    box = driver.find_element(By.ID, "token")
    box.clear()
    box.send_keys(text, Keys.TAB)  # the change event


def test_dead_letters_need_the_token(browser: WebDriver, dashboard: Dashboard):
    before = counts(dashboard.store)
    open_page(browser, dashboard)
    assert browser.find_element(By.ID, "token").get_attribute("value") == ""
    # Counts are open; dead letters (message bodies) are not.
    assert queue_table(browser)["emails"]["dead"] == "2"
    wait(
        browser,
        lambda dr: "need the token" in dead_letter_note(dr),
        "the dead-letter browser to ask for the token",
    )
    assert browser.execute_script(DEAD_LETTERS_JS) == []
    enter_token(browser, "wrong")
    wait(
        browser,
        lambda dr: "wrong or missing X-Postbox-Token" in dead_letter_note(dr),
        "a wrong token to be refused visibly",
    )
    assert browser.execute_script(DEAD_LETTERS_JS) == []
    enter_token(browser, dashboard.token)
    rows = wait(browser, lambda dr: dr.execute_script(DEAD_LETTERS_JS), "the dead letters")
    assert len(rows) == 2 and all(r["enabled"] for r in rows)
    assert counts(dashboard.store) == before


def token_help(driver: WebDriver) -> str:
    """The notice about the token: its text when it shows, else ''."""
    box = driver.find_element(By.ID, "token-help")
    return box.text if box.is_displayed() else ""


def test_a_missing_or_wrong_token_is_said_on_the_page(browser: WebDriver, dashboard: Dashboard):
    before = counts(dashboard.store)
    open_page(browser, dashboard)  # without the token
    help_text = wait(browser, token_help, "the notice of the missing token")
    assert help_text.startswith("No token"), help_text
    # It says where the token comes from and how to pass it.
    for words in ("postbox dashboard prints it", "token:", "#token=", "Token box"):
        assert words in help_text, (words, help_text)
    # An action that needs it, tried anyway: refused, and said so where it was clicked.
    click_purge(browser, "orders")
    wait(browser, alert_text, "the confirmation")
    browser.switch_to.alert.accept()
    wait(
        browser,
        lambda dr: "purge of orders refused: wrong or missing X-Postbox-Token"
        in dr.find_element(By.ID, "queue-action").text,
        "the refused purge to be reported",
    )
    assert token_help(browser).startswith("No token")
    enter_token(browser, "wrong")
    wait(
        browser,
        lambda dr: token_help(dr).startswith("The token was refused"),
        "the notice of a refused token",
    )
    enter_token(browser, dashboard.token)
    wait(browser, lambda dr: token_help(dr) == "", "the notice to go with the right token")
    assert counts(dashboard.store) == before


def click_purge(driver: WebDriver, queue: str) -> None:
    def click(dr: WebDriver) -> bool:
        button = dr.find_element(By.CSS_SELECTOR, f'#queues tbody tr[data-queue="{queue}"] button.purge')
        if not button.is_enabled():
            return False
        button.click()  # a table rebuilt meanwhile raises StaleElement before clicking: retried
        return True

    wait(driver, click, f"the purge button of {queue}")


def alert_text(driver: WebDriver) -> str | None:
    try:
        return driver.switch_to.alert.text
    except NoAlertPresentException:
        return None


def test_purge_empties_a_queue_after_a_confirmation(browser: WebDriver, dashboard: Dashboard):
    before = counts(dashboard.store)
    held = sum(before["orders"][k] for k in ("active", "locked", "scheduled", "deferred"))
    assert held > 0
    browser.get(dashboard.page)
    wait(browser, lambda dr: status(dr).startswith("updated "), "the first poll")
    assert token_help(browser) == ""
    # Cancelled: nothing happens.
    click_purge(browser, "orders")
    question = wait(browser, alert_text, "the confirmation")
    assert question.startswith("Purge orders?") and f"({held} now" in question, question
    assert "dead letters stay" in question, question
    browser.switch_to.alert.dismiss()
    assert counts(dashboard.store) == before
    # Confirmed: every message of orders goes; the other queues and the dead letters stay.
    click_purge(browser, "orders")
    wait(browser, alert_text, "the confirmation")
    browser.switch_to.alert.accept()
    noun = "message" if held == 1 else "messages"
    wait(
        browser,
        lambda dr: dr.find_element(By.ID, "queue-action").text == f"purged {held} {noun} from orders"
        and queue_table(dr)["orders"]["active"] == "0",
        "the purge to be reported and orders to show empty",
    )
    after = counts(dashboard.store)
    assert after["orders"]["active"] + after["orders"]["scheduled"] == 0
    assert after["emails"] == before["emails"] and after["audit"] == before["audit"]


def test_a_rebinding_name_is_refused(browser: WebDriver, dashboard: Dashboard):
    """A name the attacker points at 127.0.0.1 makes its page same-origin with the endpoint;
    the endpoint answers it nothing but a refusal."""
    port = int(dashboard.url.rsplit(":", 1)[1].strip("/"))
    browser.get(f"http://rebind.test:{port}/#token={dashboard.token}")
    text = browser.find_element(By.TAG_NAME, "body").text
    assert "is not this endpoint's address" in text, text
    assert not browser.find_elements(By.ID, "queues")
    # Same-origin requests from that page, the token in hand: refused too.
    got = browser.execute_async_script(
        """
        const [token, done] = arguments;
        const ask = (path, init) => fetch(path, init).then((r) => r.status, (e) => String(e));
        Promise.all([
          ask("/api/overview"),
          ask("/api/dead-letters?queue=emails", { headers: { "X-Postbox-Token": token } }),
          ask("/api/command", { method: "POST", headers: { "X-Postbox-Token": token },
                                body: JSON.stringify({ args: ["postbox", "browse", "(admin)", "emails"] }) }),
        ]).then(done);
        """,
        dashboard.token,
    )
    assert got == [421, 421, 421], got


@pytest.fixture
def evil_site():
    """A page on another site (evil.test, resolved to 127.0.0.1 on a port of its own)."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<!doctype html><title>evil</title><p>nothing to see</p>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://evil.test:{server.server_address[1]}/"
    finally:
        server.shutdown()
        thread.join()


def test_a_page_of_another_site_reads_and_changes_nothing(
    browser: WebDriver, dashboard: Dashboard, evil_site: str
):
    before = counts(dashboard.store)
    browser.get(evil_site)
    assert browser.title == "evil"
    got = browser.execute_async_script(
        """
        const [base, done] = arguments;
        const cmd = (args) => JSON.stringify({ args: ["postbox", ...args] });
        const outcome = (p) => p.then((r) => r.type + " " + r.status, (e) => e.name);
        Promise.all([
          // Reading: the answers are not this page's to read (no CORS permission).
          outcome(fetch(base + "api/overview")),
          outcome(fetch(base + "api/dead-letters?queue=emails")),
          // A fetch with the token header needs a preflight, which is refused.
          outcome(fetch(base + "api/command", { method: "POST",
              headers: { "X-Postbox-Token": "guess", "Content-Type": "text/plain" },
              body: cmd(["browse", "(admin)", "emails"]) })),
          // Simple requests go out unread: a send and a resubmit, which must not happen.
          outcome(fetch(base + "api/command", { method: "POST", mode: "no-cors",
              headers: { "Content-Type": "text/plain" },
              body: cmd(["send", "(admin)", "orders", "forged"]) })),
          outcome(fetch(base + "api/resubmit?queue=emails&id=6", { method: "POST", mode: "no-cors" })),
        ]).then(done);
        """,
        dashboard.url,
    )
    assert got == ["TypeError", "TypeError", "TypeError", "opaque 0", "opaque 0"], got
    assert counts(dashboard.store) == before


def test_metrics_parse_as_prometheus_text(dashboard: Dashboard):
    # Traffic through the dashboard's own process, which is what its counters count.
    dashboard.admin("send", "orders", "one")
    dashboard.admin("send", "orders", "two")
    dashboard.admin("receive", "orders", "--complete")
    with urllib.request.urlopen(dashboard.metrics, timeout=WAIT) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    want = counts(dashboard.store)
    families = {f.name: f for f in text_string_to_metric_families(text)}

    def family(name: str, kind: str):
        # prometheus_client names a counter's family without its _total suffix.
        f = families.get(name.removesuffix("_total")) or families.get(name)
        assert f is not None, f"no {name} in /metrics: {sorted(families)}"
        assert f.type == kind, (name, f.type)
        return f

    messages = family("postbox_queue_messages", "gauge")
    got = {(s.labels["queue"], s.labels["state"]): s.value for s in messages.samples}
    assert got == {
        (q, state): float(c[state]) for q, c in want.items() for state in COLUMNS.values()
    }
    def by_queue(f: Any) -> dict[str, float]:
        return {s.labels["queue"]: s.value for s in f.samples}

    assert by_queue(family("postbox_queue_bytes", "gauge")) == {
        q: float(c["bytes"]) for q, c in want.items()
    }
    assert by_queue(family("postbox_queue_sent_total", "counter")) == {
        "audit": 0.0,
        "emails": 0.0,
        "orders": 2.0,
    }
    assert by_queue(family("postbox_queue_completed_total", "counter"))["orders"] == 1.0
    ages = by_queue(family("postbox_queue_oldest_message_age_seconds", "gauge"))
    assert ages["audit"] == 0.0 and ages["orders"] > 0.0
    for name in ("postbox_queue_sends_per_second", "postbox_queue_completions_per_second"):
        assert set(by_queue(family(name, "gauge"))) == set(want)
    commits = family("postbox_store_commits_total", "counter").samples
    assert len(commits) == 1 and commits[0].value >= 3  # the two sends and the completion
    for name, kind in (
        ("postbox_store_operations_total", "counter"),
        ("postbox_store_operations_per_commit", "gauge"),
        ("postbox_store_log_bytes", "gauge"),
        ("postbox_store_log_records_total", "counter"),
        ("postbox_store_checkpoints_total", "counter"),
    ):
        assert len(family(name, kind).samples) == 1


def test_screenshot(browser: WebDriver, dashboard: Dashboard, tmp_path: Path):
    """docs/cli.md's picture: the page after a few seconds of traffic through the dashboard."""
    browser.set_window_size(1280, 900)
    open_page(browser, dashboard, f"#token={dashboard.token}")
    # About 4 s of traffic through the dashboard's process (so that its throughput chart has
    # lines): sends to orders and emails, and orders completed from the second second on.
    start = time.monotonic()
    for i in range(32):
        dashboard.admin("send", "orders" if i % 4 else "emails", json.dumps({"order": 300 + i}))
        if i >= 8 and i % 2:
            dashboard.admin("receive", "orders", "--complete")
        # Pacing the load generator (not waiting for the page): 8 rounds a second.
        time.sleep(max(0.0, start + (i + 1) / 8 - time.monotonic()))

    def overview() -> dict[str, Any]:
        with urllib.request.urlopen(dashboard.url + "api/overview", timeout=WAIT) as r:
            return json.load(r)

    # Wait until the sampler has seen the traffic, then until the page has drawn that poll.
    def traffic_sampled(_: WebDriver) -> int | None:
        doc = overview()
        busy = [any(q["sends_per_second"] > 0 for q in p["queues"].values()) for p in doc["history"]]
        return doc["at_ms"] if sum(busy) >= 3 else None

    at_ms = wait(browser, traffic_sampled, "three samples with sends")
    wait(
        browser,
        lambda dr: int(dr.find_element(By.ID, "status").get_attribute("data-at") or 0) >= at_ms,
        "the page to draw the sampled traffic",
    )
    want = counts(dashboard.store)
    wait(
        browser,
        lambda dr: queue_table(dr)["orders"]["active"] == str(want["orders"]["active"]),
        "the queue table to show the traffic",
    )
    # The whole page, dead-letter browser included: a window tall enough to need no scrolling.
    page, view = browser.execute_script(
        "return [document.documentElement.scrollHeight, window.innerHeight]"
    )
    if page > view:
        browser.set_window_size(1280, 900 + page - view)
        wait(
            browser,
            lambda dr: dr.execute_script("return window.innerHeight") >= page,
            "the window to grow to the page's height",
        )
    target = Path(os.environ.get("POSTBOX_SCREENSHOT") or tmp_path / "dashboard.png")
    target.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(target))
    png = target.read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    print(f"screenshot: {target}")
