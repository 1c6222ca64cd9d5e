"""The page in a real browser: headless Chromium (Debian's chromium and chromium-driver) driven by selenium against
`symform web` running as its users start it. The numbers are read from the DOM and compared with the CLI's.
Skips, saying why, where no browser is installed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("starlette", reason="symform web needs Starlette: pip install starlette uvicorn")
pytest.importorskip("uvicorn", reason="symform web needs uvicorn: pip install starlette uvicorn")
pytest.importorskip("selenium", reason="the browser test drives Chromium with selenium: pip install 'symform[test]'")

from web_serving import ROOT, served  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="no headless browser: apt-get install chromium chromium-driver (.ci/run does)")

WAIT_S = 50


def cli_json(*argv: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "symform", *argv, "--json"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def browser(tmp_path, monkeypatch):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    monkeypatch.setenv("SE_OFFLINE", "true")  # the driver and browser are given: Selenium Manager downloads nothing

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,1600"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def text_of(driver, element_id: str) -> str:
    return driver.find_element("id", element_id).text.strip()


def wait_for(driver, condition, what: str):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_S, poll_frequency=0.1).until(lambda d: condition(d), message=what)


def retype(driver, element_id: str, value: str) -> None:
    field = driver.find_element("id", element_id)
    field.clear()
    field.send_keys(value)


def test_the_page_shows_the_clis_numbers_follows_its_inputs_and_names_a_bad_value(browser):
    with served() as base:
        browser.get(f"{base}/?model=qwen3-32b")
        params = cli_json("params", "qwen3-32b")
        # as the CLI prints a count: every digit, thousands separated
        shown = wait_for(browser, lambda d: text_of(d, "params-total") if text_of(d, "params-total")[:1].isdigit() else None, "the parameter count")
        assert shown == f"{params['total']:,}" == "32,762,123,264"  # the checkpoint's 65,524,246,528 bytes of bf16, halved

        workload = ["--train", "--seq", "4096", "--gpu", "h100-sxm", "--recompute", "none", "--zero", "0", "--tp", "1", "--pp", "1", "--dp", "1", "--ep", "1"]
        one = cli_json("memory", "qwen3-32b", "--batch", "1", *workload)["total"]
        wait_for(browser, lambda d: text_of(d, "memory-total") == f"{one:,} bytes", "the memory at batch 1")
        retype(browser, "batch", "2")
        two = cli_json("memory", "qwen3-32b", "--batch", "2", *workload)["total"]
        assert two != one
        wait_for(browser, lambda d: text_of(d, "memory-total") == f"{two:,} bytes", "the memory at batch 2")
        assert "batch=2" in browser.current_url and "model=qwen3-32b" in browser.current_url

        retype(browser, "batch", "0")
        error = wait_for(browser, lambda d: text_of(d, "batch-error") or None, "a message next to the batch field")
        assert "'0' must be positive" in error
        wait_for(browser, lambda d: text_of(d, "memory-total") == "—", "no stale number beside the message")
        retype(browser, "batch", "2")
        wait_for(browser, lambda d: not text_of(d, "batch-error") and text_of(d, "memory-total") == f"{two:,} bytes", "the server answering again")

        # past 2^53 a JS number drops digits: the page keeps them (BigInt), with or without JSON source access
        for parse in ("parseWithSource", "parseMarked"):
            shown = browser.execute_script(f"return fmtCount({parse}('{{\"s\": \"9007199254740993\", \"n\": [9007199254740993, 1.5e300]}}').n[0])")
            assert shown == "9,007,199,254,740,993", parse

        # the closed form rendered by the vendored KaTeX, not left as source
        wait_for(browser, lambda d: d.find_elements("css selector", "#formula .katex"), "the formula rendered")


def test_a_link_restores_the_whole_state(browser):
    with served() as base:
        browser.get(f"{base}/?model=llama-3-8b&mode=infer&batch=1&seq=131072&gpu=a100-sxm-80gb&precision=fp8")
        memory = cli_json("memory", "llama-3-8b", "--infer", "--batch", "1", "--seq", "131072", "--gpu", "a100-sxm-80gb", "--tp", "1", "--weight-format", "fp8")
        wait_for(browser, lambda d: text_of(d, "memory-total") == f"{memory['total']:,} bytes", "the serving memory")
        fields = {name: browser.find_element("id", name).get_attribute("value") for name in ("model", "mode", "batch", "seq", "gpu", "precision")}
        assert fields == {"model": "llama-3-8b", "mode": "infer", "batch": "1", "seq": "131072", "gpu": "a100-sxm-80gb", "precision": "fp8"}
        verdict = text_of(browser, "memory-verdict")
        assert verdict.startswith("fits on a100-sxm-80gb" if memory["device"]["fits"] else "does not fit on a100-sxm-80gb")


def test_an_uploaded_declaration_gets_its_count(browser):
    declaration = ROOT / "tests" / "data" / "check" / "right_ffn.toml"
    with served() as base:
        browser.get(f"{base}/?model=qwen3-0.6b")
        wait_for(browser, lambda d: text_of(d, "params-total")[:1].isdigit(), "the preset's count")
        browser.find_element("id", "upload").send_keys(str(declaration))
        # the tiny Llama by hand: embed and head 101·64 each, final norm 64, two layers of
        # q,o 64·4·16, k,v 64·2·16, the gated MLP 3·64·96 and two norms 2·64
        expected = 2 * 101 * 64 + 64 + 2 * (2 * 4096 + 2 * 2048 + 3 * 64 * 96 + 2 * 64)
        wait_for(browser, lambda d: text_of(d, "params-total") == f"{expected:,}", "the uploaded model's count")
        assert "model=" not in browser.current_url  # an upload is not in the link


def test_the_plan_tab_names_the_sequence_parallelism_it_counts(browser):
    """The page's plan is the CLI's (torchtitan's sequence parallelism beside every tensor degree above 1): its
    tensor-parallel rows say so, and the summary carries the search's note."""
    with served() as base:
        browser.get(f"{base}/?model=llama-3.1-8b&gpus=8&seq=8192&batch=1")
        plan = cli_json("plan", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "8", "--global-batch", "8", "--seq", "8192", "--top", "5")
        wait_for(browser, lambda d: "layouts fit" in text_of(d, "plan-summary"), "the plan")
        assert f"sequence parallelism: {plan['assumptions']['sequence_parallel']}" in text_of(browser, "plan-summary")
        rows = text_of(browser, "plan-table").splitlines()[1:]
        tensor = [layout["layout"]["tensor"] for layout in plan["layouts"]]
        assert len(rows) == len(tensor) and any(t > 1 for t in tensor)
        for row, t in zip(rows, tensor):
            assert ("(sequence parallel)" in row) == (t > 1)
