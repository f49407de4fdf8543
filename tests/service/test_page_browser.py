"""The planning page (`plan serve`, GET /) in a real headless Chromium: fill the form, wait for
the ranked table, check that plotly drew the memory, step-time and days/cost charts, download
the DeepSpeed JSON and validate it with DeepSpeed's own DeepSpeedConfig, upload a config.json;
screenshots land in artifacts/browser/."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from browser import chromium, screenshot, wait_for, wait_for_file
from service_server import running_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "exports"))
from test_export_deepspeed import run_validator  # noqa: E402  (DeepSpeed's DeepSpeedConfig, world size dp)

TOKEN = "page-token"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    with running_server(tmp_path_factory.mktemp("page"), token=TOKEN) as url:
        yield url


def _fill(driver, field_id: str, value: str) -> None:
    el = driver.find_element("id", field_id)
    el.clear()
    el.send_keys(value)


def _bars(driver, chart_id: str) -> int:
    """Bars plotly drew in a chart (each a <path> under a bar trace's points)."""
    return driver.execute_script(f"return document.querySelectorAll('#{chart_id} .trace.bars .point path').length")


def test_page_plans_7b_on_48_gpus_and_downloads_a_valid_deepspeed_json(base, tmp_path):
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    with chromium(downloads) as driver:
        driver.get(base + "/")
        wait_for(driver, "document.body.dataset.ready === '1'", what="the catalog to fill the form")
        assert "plotly" not in driver.execute_script(
            "return [...document.scripts].map(s => s.src).filter(s => !s.startsWith(location.origin)).join()")
        driver.find_element("css selector", "input[name=model_source][value=size]").click()
        _fill(driver, "size", "7b")
        _fill(driver, "gpus", "48")
        _fill(driver, "tokens", "100B")
        driver.find_element("id", "plan-button").click()

        wait_for(driver, "document.querySelectorAll('#plans tbody tr').length > 0", what="the ranked plans")
        rows = driver.execute_script(
            "return [...document.querySelectorAll('#plans tbody tr')].map(r => [...r.cells].map(c => c.textContent))")
        assert len(rows) == 10
        heads = driver.execute_script("return [...document.querySelectorAll('#plans thead th')].map(c => c.textContent)")
        first = dict(zip(heads, rows[0]))
        assert first["#"] == "1" and first["fits"] == "yes" and "dp48" in first["layout"]
        assert first["sharding"] in ("none", "zero1", "zero2", "zero3") and " / 80.0" in first["GiB/GPU"]  # must fit / capacity
        assert float(first["days"]) > 0 and first["cost"].startswith("$")
        assert first["net %"].endswith("%")  # what the inter-node network costs the step (its title: Gbps needed)
        assert "Gbps per node" in driver.execute_script(
            "return document.querySelector('#plans tbody tr').cells[13].title")
        assert "48 x NVIDIA A100" in driver.find_element("id", "summary").text
        rejected = driver.execute_script("return document.querySelectorAll('#rejected tbody tr').length")
        assert rejected >= 1  # the reasons the other candidates were dropped

        # plotly drew both breakdowns (7 memory terms x 10 plans; 4 step-time parts x 10) and the curve
        wait_for(driver, "document.querySelectorAll('#curve-chart .scatterlayer .trace').length >= 2",
                 what="the days/cost curve")
        assert _bars(driver, "memory-chart") >= 10 * 5
        assert _bars(driver, "time-chart") >= 10
        titles = driver.execute_script("return [...document.querySelectorAll('.gtitle')].map(t => t.textContent)")
        assert any("Memory per GPU" in t for t in titles) and any("Step time" in t for t in titles)
        assert any("capacity 80.0 GiB" in t.text for t in driver.find_elements("css selector", "#memory-chart .annotation"))
        shot = screenshot(driver, "page-7b-48gpus.png")
        assert shot.stat().st_size > 50_000

        driver.find_element("id", "export-deepspeed").click()
        ds_file = wait_for_file(downloads, "ds_config*.json")
        config = json.loads(ds_file.read_text())
    mb, ga = int(first["mb x ga"].split(" x ")[0]), int(first["mb x ga"].split(" x ")[1])
    assert config["train_batch_size"] == mb * ga * 48
    assert config["zero_optimization"]["stage"] == {"none": 0, "zero1": 1, "zero2": 2, "zero3": 3}[first["sharding"]]
    result = run_validator(tmp_path, [{"name": "page rank 1", "dp": 48, "config": config}])
    assert result == {"checked": 1, "failures": []}


def test_page_plans_an_uploaded_config_and_names_a_bad_one(base, tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text(json.dumps({**json.loads((FIXTURES / "llama-2-7b.json").read_text()), "hidden_size": "wide"}))
    with chromium(tmp_path) as driver:
        driver.get(base + "/")
        wait_for(driver, "document.body.dataset.ready === '1'", what="the form")
        driver.find_element("id", "config").send_keys(str(FIXTURES / "mistral-7b.json"))
        _fill(driver, "gpus", "16")
        driver.find_element("id", "plan-button").click()
        wait_for(driver, "document.querySelectorAll('#plans tbody tr').length > 0", what="the ranked plans")
        assert "7.242B params" in driver.find_element("id", "summary").text
        wait_for(driver, "document.querySelectorAll('#curve-chart .scatterlayer .trace').length >= 1",
                 what="the days/cost curve")
        screenshot(driver, "page-uploaded-mistral-7b.png")

        driver.find_element("id", "config").send_keys(str(bad))
        driver.find_element("id", "plan-button").click()
        status = wait_for(driver, "document.getElementById('status').classList.contains('error') && "
                                  "document.getElementById('status').textContent", what="the error line")
        assert "broken.json: key 'hidden_size': must be an integer" in status, status


def test_page_moe_settings_show_for_moe_models_are_sent_and_refusals_are_shown(base, tmp_path):
    visible = "!document.getElementById('moe-settings').hidden"
    with chromium(tmp_path) as driver:
        driver.get(base + "/")
        wait_for(driver, "document.body.dataset.ready === '1'", what="the form")
        assert not driver.execute_script("return " + visible)  # llama2-7b, the default preset: dense
        driver.find_element("css selector", "#preset option[value='mixtral-8x7b']").click()
        wait_for(driver, visible, what="the MoE settings for mixtral-8x7b")
        _fill(driver, "gpus", "64")
        _fill(driver, "moe_capacity_factor", "0")
        driver.find_element("id", "plan-button").click()
        status = wait_for(driver, "document.getElementById('status').classList.contains('error') && "
                                  "document.getElementById('status').textContent", what="the server's 422 line")
        assert status.startswith("moe_capacity_factor: 0 is not allowed (allowed: a number > 0"), status

        _fill(driver, "moe_capacity_factor", "1.5")
        driver.find_element("id", "moe_a2a_overlap").click()
        driver.find_element("id", "optimizer_moments_bf16").click()
        driver.find_element("id", "plan-button").click()
        wait_for(driver, "document.querySelectorAll('#plans tbody tr').length > 0", what="the ranked plans")
        sent = driver.execute_script("return state.request")
        assert sent["moe_capacity_factor"] == 1.5 and sent["moe_a2a_overlap"] is True
        assert sent["optimizer_moments_bf16"] is True and sent["moe_fp8_dispatch"] is False
        screenshot(driver, "page-mixtral-moe-settings.png")

        driver.find_element("css selector", "input[name=model_source][value=size]").click()
        assert not driver.execute_script("return " + visible)  # a bare size is a dense model
        _fill(driver, "size", "7b")
        driver.find_element("id", "plan-button").click()
        wait_for(driver, "document.getElementById('status').textContent.includes('candidates fit')", what="7b planned")
        assert "moe_capacity_factor" not in driver.execute_script("return state.request")  # hidden: not sent


@pytest.mark.slow
def test_page_starts_a_tune_job_with_the_token_and_follows_it(base, tmp_path):
    with chromium(tmp_path) as driver:
        driver.get(base + "/")
        wait_for(driver, "document.body.dataset.ready === '1'", what="the form")
        _fill(driver, "tune-model", "tiny")
        _fill(driver, "tune-gpus", "2")
        _fill(driver, "tune-budget", "400")
        _fill(driver, "tune-trials", "1")
        _fill(driver, "tune-study", "page-study")
        driver.find_element("css selector", "#tune-backend option[value=fsdp]").click()
        _fill(driver, "tune-token", "not-the-token")
        driver.find_element("id", "tune-start").click()
        refused = wait_for(driver, "document.getElementById('tune-summary').textContent", what="the refusal")
        assert "missing or wrong bearer token" in refused

        _fill(driver, "tune-token", TOKEN)
        driver.find_element("id", "tune-start").click()
        summary = wait_for(driver, "(t => /finished|failed/.test(t) && t)(document.getElementById('tune-summary').textContent)",
                           timeout_s=420, what="the study to finish")
        assert "study page-study: finished" in summary and "best: trial" in summary, summary
        wait_for(driver, "[...document.querySelectorAll('#trials tbody tr')].some(r => r.cells[1].textContent === 'ok')",
                 what="a finished trial's row")
        heads = driver.execute_script("return [...document.querySelectorAll('#trials thead th')].map(c => c.textContent)")
        row = dict(zip(heads, driver.execute_script(
            "return [...document.querySelector('#trials tbody tr').cells].map(c => c.textContent)")))
        assert row["status"] == "ok" and float(row["measured tokens/s"].replace(",", "")) > 0
        assert float(row["predicted tokens/s"].replace(",", "")) > 0
        wait_for(driver, "document.querySelectorAll('#tune-chart .scatterlayer .point').length >= 1",
                 what="the predicted-vs-measured chart")
        link = driver.find_element("id", "dashboard-link").get_attribute("href")
        assert link.startswith("http://127.0.0.1:8080/dashboard/studies/"), link
        # the held-out calibration check: one completed trial, nothing fitted, the uncalibrated planner kept
        calibration = driver.find_element("id", "tune-calibration").text
        assert calibration.startswith("calibration: kept the uncalibrated planner") and "not fitted" in calibration
        assert not driver.find_element("id", "tune-stop").is_displayed()  # finished: nothing to stop
        screenshot(driver, "page-tune-tiny.png")


def _summary_matching(driver, pattern: str, what: str, timeout_s: float = 420) -> str:
    return wait_for(driver, f"(t => /{pattern}/.test(t) && t)(document.getElementById('tune-summary').textContent)",
                    timeout_s=timeout_s, what=what)


@pytest.mark.slow
def test_page_stops_a_running_study_after_asking_and_resumes_it(base, tmp_path):
    import re

    with chromium(tmp_path) as driver:
        driver.get(base + "/")
        wait_for(driver, "document.body.dataset.ready === '1'", what="the form")
        for field, value in (("tune-model", "tiny"), ("tune-gpus", "2"), ("tune-budget", "1800"),
                             ("tune-trials", "6"), ("tune-study", "page-stop"), ("tune-token", TOKEN)):
            _fill(driver, field, value)
        driver.find_element("css selector", "#tune-backend option[value=fsdp]").click()
        driver.find_element("id", "tune-start").click()
        running = _summary_matching(driver, "running .*this run: launched [1-9]", "a trial launched by this run")
        mine, everyone = re.search(r"this run: launched (\d+) .*the study in all: (\d+) launched", running).groups()
        assert mine == everyone, running  # a new study: this run's trials are all of them
        stop = driver.find_element("id", "tune-stop")
        assert stop.is_displayed()

        stop.click()  # it asks first; dismissed, nothing is sent
        alert = driver.switch_to.alert
        assert "Stop study page-stop?" in alert.text and "resumes it" in alert.text, alert.text
        alert.dismiss()
        assert "stopping" not in driver.find_element("id", "tune-summary").text
        stop.click()
        driver.switch_to.alert.accept()
        line = _summary_matching(driver, "^study page-stop: (stopping|interrupted)", "the stop to show", timeout_s=180)
        if line.startswith("study page-stop: stopping"):  # while the worker stops: the page's words, not the API's
            assert "SIGTERM sent to its worker" in line and "GET /tune" not in line and "POST /tune" not in line, line
        stopped = _summary_matching(driver, "^study page-stop: interrupted", "the study to read interrupted", timeout_s=180)
        assert stopped.startswith("study page-stop: interrupted | stopped by the page's Stop from 127.0.0.1"), stopped
        assert stopped.count("SIGTERM") == 1 and stopped.count("resum") == 1, stopped  # who and how to resume: once
        assert stopped.endswith("to resume: Start tuning with study page-stop (filled in above)"), stopped
        assert "| its last run: launched" in stopped and "| this run:" not in stopped, stopped  # it has ended
        assert not driver.find_element("id", "tune-stop").is_displayed()
        assert driver.find_element("id", "tune-study").get_attribute("value") == "page-stop"  # filled in to resume
        screenshot(driver, "page-tune-stopped.png")

        driver.find_element("id", "tune-start").click()  # resume: this run's trials apart from the study's
        resumed = _summary_matching(driver, "running .*this run: launched [1-9]", "a trial launched by the resumed run")
        mine, everyone = re.search(r"this run: launched (\d+) .*the study in all: (\d+) launched", resumed).groups()
        assert int(everyone) > int(mine), resumed  # the first run's interrupted trial counts in the study only
        driver.find_element("id", "tune-stop").click()
        driver.switch_to.alert.accept()
        _summary_matching(driver, "^study page-stop: interrupted", "the resumed study to stop", timeout_s=180)
