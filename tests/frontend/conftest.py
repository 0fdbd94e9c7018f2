"""The browser tests' page: one page per test module, re-navigated by each test.

A fresh browser context per test started a renderer process and compiled plotly.js and the view's modules anew for
every test: the Operator page took 2.2 CPU-s of chromium in a new context, 1.6 in a new tab of a used context and
1.5 re-opened in the same tab (2026-12-02, load 12-18), whose wall time fell from 2.3 s to 0.6 s over four loads.
So ``page`` here is the module's one tab, put back before each test as a fresh one would be in what a test can
see: the window size (``VIEWPORT``), the default timeout, no error seen yet; and after each test its storage and
cookies are cleared, its routes removed and the mouse moved off the page. Console errors (a CSP violation is one)
and page errors still fail the test that saw them, at its teardown.

A test that needs a cold tab (an empty HTTP cache: what a first visit asks for), or whose own server stops when it
ends (the tab would go on polling it), asks for ``fresh_page``: a page of its own context, as tests/conftest.py's.
After a failed test the tab is sent to about:blank, so what the failure left running does not fail the next test.
"""

from __future__ import annotations

import pytest

from tests.conftest import VIEWPORT

DEFAULT_TIMEOUT_MS = 10_000


class ModuleTab:
    """A browser context and its one page, kept across a module's tests; the errors it saw since the last test."""

    def __init__(self, browser):
        self.browser = browser
        self.context = self.tab = None
        self.errors: list[str] = []

    def page(self):
        if self.tab is None or self.tab.is_closed():  # (a crashed tab is replaced)
            if self.context is not None:
                self.context.close()
            self.context = self.browser.new_context(viewport=VIEWPORT)
            self.tab = self.context.new_page()
            self.tab.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
            self.tab.on("console", lambda m: self.errors.append(f"console {m.type}: {m.text}")
                        if m.type == "error" else None)
        return self.tab

    def reset(self) -> None:
        """What one test leaves for the next: storage, cookies and routes cleared (the tab stays on its page, so the
        next navigation reuses its renderer)."""
        tab = self.tab
        if tab is None or tab.is_closed():
            return
        tab.unroute_all(behavior="ignoreErrors")
        tab.mouse.move(0, 0)  # (no hover left over the next test's page)
        if tab.url.startswith("http"):
            try:
                tab.evaluate("() => { localStorage.clear(); sessionStorage.clear(); }")
            except Exception:  # noqa: BLE001 (a page that has no storage or is going away: nothing kept to clear)
                pass
        origins = [o["origin"] for o in self.context.storage_state()["origins"]]  # (those the tab has left)
        if origins:
            cdp = self.context.new_cdp_session(tab)
            for origin in origins:
                cdp.send("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "local_storage"})
            cdp.detach()
        self.context.clear_cookies()
        self.errors.clear()

    def close(self) -> None:
        if self.context is not None:
            self.context.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "call":
        item.failed_call = outcome.get_result().failed


@pytest.fixture(scope="module")
def module_tab(browser):
    tab = ModuleTab(browser)
    yield tab
    tab.close()


@pytest.fixture()
def page(module_tab, request):
    """The module's tab (1600×1000, 10 s default timeout) under the server's real Content-Security-Policy; console
    errors and page errors fail the test at teardown. Wait with locators, or ``wait_for_function`` given a
    *function* (see tests/conftest.py's ``page``)."""
    pg = module_tab.page()
    module_tab.errors.clear()
    pg.set_default_timeout(DEFAULT_TIMEOUT_MS)
    if pg.viewport_size != VIEWPORT:
        pg.set_viewport_size(VIEWPORT)
    yield pg
    errors = list(module_tab.errors)
    if getattr(request.node, "failed_call", False):  # (whatever it left running stops here, not in the next test)
        pg.goto("about:blank")
    module_tab.reset()
    assert not errors, errors


@pytest.fixture()
def fresh_page(browser):
    """A page of its own new context (an empty cache), with the same error checks."""
    context = browser.new_context(viewport=VIEWPORT)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    pg.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    pg.set_default_timeout(DEFAULT_TIMEOUT_MS)
    yield pg
    context.close()
    assert not errors, errors
