#!/usr/bin/env python3
"""Drives an evaluation's report page in headless Chromium by clicks (WebDriver: Selenium from
PyPI, Debian's chromium-driver) and checks what the DOM then shows.

Usage: report_clicks.py REPORT_HTML [--shots DIR]

Each step clicks as a reader would and compares the page with what the page's own data say:
sorting a lower-is-better column ascending on the first click, picking two configs and the
questions only the first finds, an exact question-id filter, hiding the questions every config
ranks alike, opening a drill-down, exporting the config table as CSV. One line per check; exit 1
on the first that fails. With --shots, a PNG of each view goes to DIR (the book's pictures).
"""
import csv
import json
import os
import sys
import tempfile
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select


def fail(msg):
    print(f"report-clicks: FAIL {msg}")
    sys.exit(1)


def ok(msg):
    print(f"report-clicks: ok {msg}")


def driver_for(downloads):
    opts = webdriver.ChromeOptions()
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1400"]:
        opts.add_argument(a)
    for b in ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"]:
        if os.path.exists(b):
            opts.binary_location = b
            break
    opts.add_experimental_option("prefs", {"download.default_directory": downloads, "download.prompt_for_download": False})
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = None
    for d in ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]:
        if os.path.exists(d):
            service = Service(d)
            break
    drv = webdriver.Chrome(options=opts, service=service) if service else webdriver.Chrome(options=opts)
    # Downloads in headless Chromium need the DevTools permission (Browser.* in current
    # Chromium, Page.* in older ones).
    for cmd in ["Browser.setDownloadBehavior", "Page.setDownloadBehavior"]:
        try:
            drv.execute_cdp_cmd(cmd, {"behavior": "allow", "downloadPath": downloads})
            break
        except Exception:  # noqa: BLE001 - the other name is tried
            continue
    return drv


def console_errors(drv):
    try:
        return [e for e in drv.get_log("browser") if e.get("level") == "SEVERE"]
    except Exception:  # noqa: BLE001 - a driver without logs
        return []


def visible_rows(drv, table_id):
    return [r for r in drv.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr") if r.is_displayed()]


def column_index(drv, table_id, key):
    heads = drv.find_elements(By.CSS_SELECTOR, f"#{table_id} thead th")
    for i, h in enumerate(heads):
        if h.get_attribute("data-k") == key:
            return i, h
    fail(f"{table_id}: no column {key}")


def values(drv, table_id, col):
    out = []
    for r in visible_rows(drv, table_id):
        v = r.find_elements(By.TAG_NAME, "td")[col].get_attribute("data-v")
        out.append(None if v in (None, "") else float(v))
    return out


def shot(drv, shots, name):
    if shots:
        os.makedirs(shots, exist_ok=True)
        drv.save_screenshot(os.path.join(shots, f"report-{name}.png"))


def main():
    args = sys.argv[1:]
    if not args:
        fail("usage: report_clicks.py REPORT_HTML [--shots DIR]")
    page = os.path.abspath(args[0])
    shots = args[args.index("--shots") + 1] if "--shots" in args else None
    downloads = tempfile.mkdtemp(prefix="report-clicks-")
    drv = driver_for(downloads)
    try:
        drv.get("file://" + page)
        errors = console_errors(drv)
        if errors:
            fail(f"the console logged errors on load: {errors}")
        shot(drv, shots, "configs")

        # 1. The first click on a lower-is-better heading (p adj.) sorts ascending.
        col, head = column_index(drv, "config-table", "p")
        head.click()
        got = [v for v in values(drv, "config-table", col) if v is not None]
        if got != sorted(got):
            fail(f"p adj. after one click: {got}, not ascending")
        ok(f"one click on p adj. sorts ascending ({len(got)} values)")
        col, head = column_index(drv, "config-table", "mrr@10")
        head.click()
        got = [v for v in values(drv, "config-table", col) if v is not None]
        if got != sorted(got, reverse=True):
            fail(f"MRR@10 after one click: {got}, not descending")
        ok("one click on MRR@10 sorts best first")
        best_cells = drv.find_elements(By.CSS_SELECTOR, "#config-table td.best")
        if not best_cells:
            fail("no best value is marked")
        ok(f"{len(best_cells)} best values marked")

        # 2. Pick two configs; show the questions only A finds.
        table = "question-table"
        options = Select(drv.find_element(By.ID, "pick-a")).options
        if len(options) < 2:
            fail("fewer than two configs to pick")
        a_key, b_key = options[-1].get_attribute("value"), options[0].get_attribute("value")
        Select(drv.find_element(By.ID, "pick-a")).select_by_value(a_key)
        Select(drv.find_element(By.ID, "pick-b")).select_by_value(b_key)
        Select(drv.find_element(By.ID, "pick-show")).select_by_value("a-only")
        a_col, _ = column_index(drv, table, a_key)
        b_col, _ = column_index(drv, table, b_key)
        expected = 0
        for r in drv.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr"):
            cells = r.find_elements(By.TAG_NAME, "td")
            va, vb = cells[a_col].get_attribute("data-v"), cells[b_col].get_attribute("data-v")
            if va and vb and float(va) < 98 and float(vb) >= 98:
                expected += 1
        shown = len(visible_rows(drv, table))
        if shown != expected:
            fail(f"A finds, B does not: {shown} rows shown, the cells say {expected}")
        summary = drv.find_element(By.ID, "pick-summary").text
        if f"only A finds it on {expected}," not in summary:
            fail(f"the tally says {summary!r}, the cells {expected}")
        ok(f"pick two: {expected} questions only A finds; tally: {summary}")
        shot(drv, shots, "pick-two")
        Select(drv.find_element(By.ID, "pick-show")).select_by_value("all")

        # 3. An exact question id.
        rows = drv.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr")
        qid = rows[0].find_element(By.CSS_SELECTOR, "td a").text.strip()
        box = drv.find_element(By.ID, "q-filter")
        box.clear()
        box.send_keys(qid)
        shown = [r.find_element(By.CSS_SELECTOR, "td a").text.strip() for r in visible_rows(drv, table)]
        if shown != [qid]:
            fail(f"filter {qid!r} shows {shown}")
        ok(f"filter {qid!r} shows exactly that question")
        box.clear()
        box.send_keys(" ")
        box.clear()
        drv.execute_script("document.getElementById('q-filter').dispatchEvent(new Event('input'))")

        # 4. Hide the questions every config ranks alike.
        drv.find_element(By.ID, "hide-agree").click()
        alike = 0
        for r in drv.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr"):
            vs = {c.get_attribute("data-v") for c in r.find_elements(By.TAG_NAME, "td")[1:]} - {"", None}
            alike += len(vs) <= 1
        total = len(drv.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr"))
        shown = len(visible_rows(drv, table))
        if shown != total - alike:
            fail(f"hide alike: {shown} shown of {total}, {alike} alike")
        ok(f"hide alike: {alike} of {total} questions hidden")
        drv.find_element(By.ID, "hide-agree").click()

        # 5. A drill-down opens by a click on its question.
        link = rows[0].find_element(By.CSS_SELECTOR, "td a")
        target = link.get_attribute("href").split("#", 1)[1]
        drv.find_element(By.CSS_SELECTOR, f"details#{target} summary").click()
        details = drv.find_element(By.ID, target)
        if details.get_attribute("open") is None:
            fail(f"{target} did not open")
        chips = details.find_elements(By.CSS_SELECTOR, "table.passages a")
        if chips and any(not c.get_attribute("href") for c in chips):
            fail("a passage in the drill-down has no link")
        ok(f"drill-down {target} opens with {len(chips)} linked passages")
        drv.execute_script("arguments[0].scrollIntoView()", details)
        shot(drv, shots, "drill-down")

        # 6. CSV of the config table's rows.
        drv.execute_script("window.scrollTo(0, 0)")
        drv.find_element(By.CSS_SELECTOR, "button.csv[data-table='config-table']").click()
        want = len(visible_rows(drv, "config-table"))
        path = None
        for _ in range(100):
            done = [f for f in os.listdir(downloads) if f.endswith(".csv")]
            if done:
                path = os.path.join(downloads, done[0])
                break
            time.sleep(0.1)
        if not path:
            fail("no CSV was downloaded")
        with open(path, newline="", encoding="utf-8") as f:
            got = list(csv.reader(f))
        if len(got) - 1 != want or got[0][0] != "Config":
            fail(f"CSV: {len(got) - 1} rows (want {want}), header {got[0][:3]}")
        ok(f"CSV of the config table: {want} rows, {len(got[0])} columns")
        pairs = drv.find_elements(By.ID, "pair-table")
        if pairs:
            drv.execute_script("arguments[0].scrollIntoView()", pairs[0])
            shot(drv, shots, "pairs")
        errors = console_errors(drv)
        if errors:
            fail(f"the console logged errors while clicking: {errors}")
        print(json.dumps({"report": page, "checks": 8}))
    finally:
        drv.quit()


if __name__ == "__main__":
    main()
