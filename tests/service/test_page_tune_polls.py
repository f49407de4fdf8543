"""The page's tuning panel against a real `plan serve` in a real headless Chromium, on a slow network: one poll of
GET /tune/STUDY at a time (polls every 2 s piled up when an answer took longer, and landed out of order), the newest
answer wins (following another study drops the older one's late answer), and an interrupted study's line says once
who stopped it and the one click that resumes it. The page's `fetch` is wrapped to hold chosen answers of the real
server back (a slow server or network) and to count the requests in flight; the server is not replaced."""

from __future__ import annotations

import pytest
from browser import chromium, screenshot, wait_for
from service_server import running_server

TOKEN = "polls-token"
# holds the real server's answer to GET /tune/STUDY (and its trials) back `window.slow[STUDY]` ms; counts in flight
SLOW_FETCH = """
window.slow = {}; window.inFlight = 0; window.maxInFlight = 0; window.asked = [];
const realFetch = window.fetch.bind(window);
window.fetch = async (url, opts) => {
  const m = /^\\/tune\\/([^/?]+)$/.exec(String(url));
  if (!m || (opts && opts.method && opts.method !== "GET")) return realFetch(url, opts);
  window.asked.push(m[1]);
  window.inFlight++;
  window.maxInFlight = Math.max(window.maxInFlight, window.inFlight);
  try {
    const r = await realFetch(url, opts);
    await new Promise((done) => setTimeout(done, window.slow[m[1]] || 0));
    return r;
  } finally {
    window.inFlight--;
  }
};
"""


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    with running_server(tmp_path_factory.mktemp("polls"), token=TOKEN) as url:
        yield url


def _page(driver, base):
    driver.get(base + "/")
    wait_for(driver, "document.body.dataset.ready === '1'", what="the form")
    driver.execute_script(SLOW_FETCH)


def _summary(driver) -> str:
    return driver.find_element("id", "tune-summary").text


def test_one_poll_at_a_time_when_answers_are_slower_than_the_poll_interval(base, tmp_path):
    with chromium(tmp_path) as driver:
        _page(driver, base)
        # a running study would poll on; one that is not there ends the polling at its (late) 404
        driver.execute_script("window.slow['slow-a'] = 7000; follow('slow-a');")
        wait_for(driver, "document.getElementById('tune-summary').textContent.includes('no study')", timeout_s=30,
                 what="the late answer")
        assert driver.execute_script("return window.maxInFlight") == 1  # 7 s answers, 2 s interval: was 4 at once
        assert driver.execute_script("return window.asked.length") == 1


def test_the_newest_answer_wins_over_an_older_studys_late_one(base, tmp_path):
    with chromium(tmp_path) as driver:
        _page(driver, base)
        driver.execute_script("window.slow['old-study'] = 4000; follow('old-study');")
        wait_for(driver, "window.inFlight === 1", what="the first study's poll on its way")
        driver.execute_script("follow('new-study');")  # Follow another study while the first one's answer is late
        wait_for(driver, "document.getElementById('tune-summary').textContent.includes('new-study')", what="its answer")
        wait_for(driver, "window.inFlight === 0", timeout_s=30, what="the late answer to come")
        summary = _summary(driver)
        assert "new-study" in summary and "old-study" not in summary, summary  # the late answer was dropped
        assert driver.find_element("id", "watch-study").get_attribute("value") == "new-study"


def test_a_study_stopped_from_the_page_says_once_who_stopped_it_and_the_click_that_resumes_it(base, tmp_path):
    with chromium(tmp_path) as driver:
        _page(driver, base)
        for field, value in (("tune-model", "tiny"), ("tune-gpus", "1"), ("tune-budget", "600"), ("tune-trials", "2"),
                             ("tune-study", "stopped-here"), ("tune-token", TOKEN)):
            el = driver.find_element("id", field)
            el.clear()
            el.send_keys(value)
        driver.find_element("id", "tune-start").click()
        wait_for(driver, "!document.getElementById('tune-stop').hidden", what="the Stop control of the running study")
        driver.find_element("id", "tune-stop").click()
        driver.switch_to.alert.accept()
        line = wait_for(driver, "(t => /^study stopped-here: interrupted/.test(t) && t)"
                                "(document.getElementById('tune-summary').textContent)", timeout_s=180,
                        what="the study to read interrupted")
        screenshot(driver, "page-tune-stopped-line.png")
        assert "stopped by the page's Stop from 127.0.0.1 at " in line and "(SIGTERM to its worker)" in line, line
        assert line.count("stopped by") == 1 and line.count("SIGTERM") == 1, line  # who: once
        assert line.count("resum") == 1 and line.endswith("to resume: Start tuning with study stopped-here "
                                                          "(filled in above)"), line  # the one click, once
        assert "POST /tune" not in line and "DELETE /tune" not in line, line  # the page's words, not the API's
        assert driver.find_element("id", "tune-study").get_attribute("value") == "stopped-here"


@pytest.mark.slow
def test_a_finished_studys_line_says_its_rule_once_and_its_last_runs_trials(base, tmp_path):
    with chromium(tmp_path) as driver:
        _page(driver, base)
        for field, value in (("tune-model", "tiny"), ("tune-gpus", "1"), ("tune-budget", "600"), ("tune-trials", "1"),
                             ("tune-study", "done-here"), ("tune-token", TOKEN)):
            el = driver.find_element("id", field)
            el.clear()
            el.send_keys(value)
        driver.find_element("css selector", "#tune-backend option[value=fsdp]").click()
        driver.find_element("id", "tune-start").click()
        line = wait_for(driver, "(t => /^study done-here: (finished|failed|interrupted)/.test(t) && t)"
                                "(document.getElementById('tune-summary').textContent)", timeout_s=420,
                        what="the study to end")
        screenshot(driver, "page-tune-finished-line.png")
        assert line.startswith("study done-here: finished | its last run: launched 1 trial (ok 1); the study in all: "
                               "1 launched of 1 trials (ok 1)"), line
        # its rule, once; the trial counts once (the API's why says them again, as "this run")
        assert line.endswith(" | ended: launched 1 trial (--max-trials)"), line
        assert "this run" not in line and "in the study)" not in line, line


def test_the_page_says_when_the_server_is_gone_and_follows_the_study_again_when_it_is_back(tmp_path):
    """kill -9 of the server mid-study: the page went on showing 'running' (its polls failed unseen); its worker
    lives on, and the server started again on the same port is followed again."""
    import httpx
    from service_server import free_port

    port, started = free_port(), []
    auth = {"Authorization": f"Bearer {TOKEN}"}
    running = "(t => /^study gone: running/.test(t) && t)(document.getElementById('tune-summary').textContent)"
    try:
        with running_server(tmp_path, token=TOKEN, port=port, started=started) as base, chromium(tmp_path) as driver:
            _page(driver, base)
            r = httpx.post(base + "/tune", json={"model": "tiny", "gpus": 1, "budget_s": 900, "study": "gone"},
                           headers=auth, timeout=30)
            assert r.status_code == 202, r.text
            driver.execute_script("follow('gone')")
            wait_for(driver, running, what="the study running")
            started[0].kill()  # kill -9 of the server
            started[0].wait(timeout=60)
            gone = wait_for(driver, "(t => t.includes('not answering') && t)(document.getElementById('tune-summary')"
                                    ".textContent)", timeout_s=30, what="the page to say the server is gone")
            assert gone.startswith("study gone: the server is not answering"), gone
            with running_server(tmp_path, token=TOKEN, port=port) as again:
                wait_for(driver, running, timeout_s=60, what="the study followed again")
                assert httpx.delete(again + "/tune/gone", headers=auth, timeout=30).status_code == 202
                line = wait_for(driver, "(t => /^study gone: interrupted/.test(t) && t)(document.getElementById("
                                        "'tune-summary').textContent)", timeout_s=180, what="the study to stop")
                assert "stopped by DELETE /tune/gone from 127.0.0.1" in line, line
    finally:  # its worker, whatever happened
        import json
        import os
        import signal

        from plan_service.tune_jobs import _is_worker

        folder = tmp_path / "work" / "gone"
        worker = json.loads((folder / "worker.json").read_text()) if (folder / "worker.json").exists() else {}
        if worker and _is_worker(worker["pid"], folder, worker.get("start_ticks")):
            os.killpg(worker["pid"], signal.SIGKILL)
