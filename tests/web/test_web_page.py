"""The operator's page in a real browser (headless Chromium, Selenium) against the real appliance playing the
bundled demo (vtest.avi, the real detector, a real mosquitto), bound beyond loopback so that it asks for a login:
the picture shows (pixels, not a blank box), a line drawn across the walkway with the mouse and applied counts
`cross` events over MQTT, a self-intersecting zone shows its error and is not applied, and a viewer cannot edit.
One appliance and one browser for the module; screenshots go to the module's artifacts folder (and to
$APPLIANCE_UI_SCREENSHOTS when set)."""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pytest
from selenium.webdriver import ActionChains, Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select
from support.browser import chromium, save_screenshot
from support.daemon import RunningDaemon
from support.engineseed import seed_state_dir
from support.eventpage import page_with_events
from support.httpclient import get
from support.mosquitto import Mosquitto
from support.ports import free_port
from support.rtspclients import frames_of, probe, psnr, rate, start_grab
from support.shm import private_shm_dir
from support.subscriber import Subscriber
from support.wait import wait_until
from support.webattack import HealthPoller, login_cookie, open_streams, slow_bodies

from appliance.appconfig.demo import DEMO_CONFIG, DEMO_VIDEO_ENV
from appliance.web.auth import hash_password
from appliance.web.routes import STREAMS_PER_SESSION
from appliance.webserver import limits

REPO = Path(__file__).resolve().parents[2]
VTEST = REPO / ".models" / "vtest" / "vtest.avi"
USERS = {"olga": ("operator", "line-setup-1"), "victor": ("viewer", "just-looking-2")}
# A vertical line left of the demo's own, across the walkway: people walk across it both ways.
NEW_LINE = ((300, 200), (300, 470))
BOWTIE = ((100, 100), (250, 250), (250, 100), (100, 250))  # its edges 0-1 and 2-3 cross
RESTREAM_FPS = 6

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("detector_onnx")]


@dataclass
class Site:
    url: str
    rtsp: str  # rtsp://<host>:<port>
    daemon: RunningDaemon  # the test that restarts the appliance puts the new one here
    events: Subscriber
    root: Path
    config: Path

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"


def _lan_address() -> str:
    """This machine's address on its default route (not loopback), where the page asks for a login."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent, the kernel only picks a route
        return str(probe.getsockname()[0])


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, engine_seed: Path) -> Iterator[Site]:
    assert VTEST.is_file(), f"{VTEST} missing: scripts/setup.d/40-vtest.sh fetches it"
    root = tmp_path_factory.mktemp("page")
    shm = private_shm_dir()
    shm_root = next(shm)
    users = "".join(f"\n    - {{name: {n}, role: {r}, password_hash: '{hash_password(p)}'}}"
                    for n, (r, p) in USERS.items())
    host, port, rtsp_port = _lan_address(), free_port(), free_port()
    text = DEMO_CONFIG.read_text().replace("health:\n", "health:\n  host: 0.0.0.0\n")
    config = root / "demo.yaml"
    config.write_text(f"{text}\npaths:\n  state_dir: {root / 'state'}\n  shm_root: {shm_root}\n"
                      f"web:\n  users:{users}\n"
                      f"restream:\n  enabled: true\n  port: {rtsp_port}\n  fps: {RESTREAM_FPS}\n")
    seed_state_dir(root / "state", engine_seed)
    with pytest.MonkeyPatch.context() as env, Mosquitto(root / "broker") as broker:
        env.setenv("APPLIANCE_MQTT_PORT", str(broker.port))
        env.setenv("APPLIANCE_HEALTH_PORT", str(port))
        env.setenv(DEMO_VIDEO_ENV, str(VTEST))
        events = Subscriber(broker, "appliance/demo/+/events")
        site = Site(f"http://{host}:{port}", f"rtsp://{host}:{rtsp_port}", RunningDaemon(root, config, REPO), events,
                    root, config)
        try:
            assert site.daemon.notify.wait_for("READY=1", 240), site.daemon.tail()
            yield site
            assert site.daemon.terminate() == 0, site.daemon.tail()
        finally:
            site.daemon.close()
            events.close()
    next(shm, None)


@pytest.fixture(scope="module")
def browser() -> Iterator[Chrome]:
    driver = chromium()
    try:
        yield driver
    finally:
        driver.quit()


def _login(browser: Chrome, site: Site, name: str) -> None:
    browser.get("about:blank")  # the last page's scripts stop: none of them follows a 401 to /login meanwhile
    browser.get(f"{site.url}/login")
    browser.delete_all_cookies()
    browser.get(f"{site.url}/camera/hall")
    assert browser.current_url.endswith("/login"), f"no login asked beyond loopback: {browser.page_source[:300]}"
    browser.find_element(By.ID, "name").send_keys(name)
    browser.find_element(By.ID, "password").send_keys(USERS[name][1])
    browser.find_element(By.ID, "login").click()
    wait_until(lambda: browser.current_url.rstrip("/") == site.url, 10, 0.1, "the overview after logging in")
    browser.get(f"{site.url}/camera/hall")
    wait_until(lambda: browser.execute_script("return document.body.dataset.ready === '1'"), 20, 0.1,
               "the camera page to load")


def _picture_spread(browser: Chrome) -> float:
    """The standard deviation of the canvas's grey levels: 0 for a blank box, tens for a picture of the hall."""
    return float(browser.execute_script("""
        const c = document.getElementById('picture'), d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0, s = 0, s2 = 0;
        for (let i = 0; i < d.length; i += 4 * 97) { const g = (d[i] + d[i+1] + d[i+2]) / 3; n++; s += g; s2 += g * g; }
        return Math.sqrt(s2 / n - (s / n) ** 2);"""))


def _green_pixels(browser: Chrome) -> int:
    """Pixels of the canvas in the boxes' green (BOX_BGR), which the hall's picture itself does not have."""
    return int(browser.execute_script("""
        const c = document.getElementById('picture'), d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 0; i < d.length; i += 4) if (d[i+1] > 200 && d[i] < 80 && d[i+2] < 80) n++;
        return n;"""))


def _click_frame(browser: Chrome, points: tuple[tuple[int, int], ...]) -> None:
    """Mouse clicks on the picture at these frame pixels (the canvas is scaled to the page)."""
    canvas = browser.find_element(By.ID, "picture")
    width, height = browser.execute_script("return [arguments[0].width, arguments[0].height]", canvas)
    rect = canvas.rect
    chain = ActionChains(browser)
    for x, y in points:
        chain.move_to_element_with_offset(canvas, round(x * rect["width"] / width - rect["width"] / 2),
                                          round(y * rect["height"] / height - rect["height"] / 2)).click()
    chain.perform()


def _layout(browser: Chrome) -> dict:
    return dict(browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch('/api/cameras/hall/layout').then(r => r.json()).then(done);"))


def test_the_operator_sees_the_picture_draws_a_line_and_it_counts(site: Site, browser: Chrome) -> None:
    _login(browser, site, "olga")
    wait_until(lambda: _picture_spread(browser) > 15, 30, 0.2, "the hall's picture on the canvas")
    # The annotated stream plays (the restream is on): its boxes, drawn by the appliance, show on the canvas.
    first = wait_until(lambda: browser.execute_script("return S.video && S.video.currentTime"), 40, 0.2,
                       "the annotated video playing (else: " + str(browser.execute_script("return S.fallback")) + ")")
    wait_until(lambda: browser.execute_script("return S.video.currentTime") > first + 1, 20, 0.2, "the video advancing")
    assert "video: the annotated stream" in browser.find_element(By.ID, "frame-info").text
    wait_until(lambda: _green_pixels(browser) > 100, 30, 0.2, "a tracked person's box drawn on the picture")
    save_screenshot(browser, site.artifacts, "ui-camera.png")

    browser.find_element(By.ID, "add-line").click()
    _click_frame(browser, NEW_LINE)
    name = browser.find_element(By.CSS_SELECTOR, "#shapes .shape:last-child .name")
    name.clear()
    name.send_keys("aisle")
    browser.find_element(By.ID, "apply").click()
    wait_until(lambda: "Applied" in browser.find_element(By.ID, "applied").text, 10, 0.1, "the edit applied")
    line = next(ln for ln in _layout(browser)["lines"] if ln["name"] == "aisle")
    assert abs(line["a"][0] - 300) <= 3 and abs(line["b"][0] - 300) <= 3, line  # where the mouse drew it
    site.events.wait_for(lambda ms: any(m.json().get("line") == "aisle" and m.json()["event"] == "cross"
                                        for m in ms), timeout=60, what="a cross event on the drawn line")
    save_screenshot(browser, site.artifacts, "ui-editor.png")
    kept = json.loads((site.state_dir / "layouts" / "hall.json").read_text())
    assert kept["edited_by"] == "olga" and [ln["name"] for ln in kept["lines"]] == ["walkway", "aisle"]
    assert "applied on the page by olga" in site.daemon.log_path.read_text()
    browser.get(site.url)
    wait_until(lambda: browser.execute_script(
        "return [...document.querySelectorAll('#events li')].some(li => li.dataset.name === 'aisle')"), 20, 0.2,
        "the line's events on the overview")
    level = get(f"{site.url}/healthz", expect=200).json()["level"]
    wait_until(lambda: browser.find_element(By.ID, "verdict").text.startswith(level.upper()), 10, 0.2,
               f"the overview's verdict saying the health level {level!r}")
    save_screenshot(browser, site.artifacts, "ui-overview.png")


def test_a_self_intersecting_zone_shows_its_error_and_is_not_applied(site: Site, browser: Chrome) -> None:
    _login(browser, site, "olga")
    before = _layout(browser)
    browser.find_element(By.ID, "add-zone").click()
    _click_frame(browser, BOWTIE)
    browser.find_element(By.ID, "finish").click()
    browser.find_element(By.ID, "apply").click()
    problem = wait_until(lambda: browser.execute_script(  # read in the page: the list is redrawn as it changes
        "return document.querySelector('#shapes .shape:last-child .problem').textContent"), 10, 0.1,
        "the zone's error beside it")
    assert "intersect" in problem.lower(), problem
    save_screenshot(browser, site.artifacts, "ui-zone-error.png")
    assert _layout(browser)["zones"] == before["zones"]  # nothing applied


def _post_layout(browser: Chrome, token_js: str) -> int:
    return int(browser.execute_async_script(f"""
        const done = arguments[arguments.length - 1];
        fetch('/api/cameras/hall/layout', {{method: 'POST', headers: {{'Content-Type': 'application/json',
          'X-CSRF-Token': {token_js}}}, body: JSON.stringify({{zones: [], lines: []}})}})
          .then(r => done(r.status));"""))


def test_an_edit_without_the_sessions_csrf_token_is_refused(site: Site, browser: Chrome) -> None:
    _login(browser, site, "olga")
    assert _post_layout(browser, "''") == 403 and _post_layout(browser, "'a-guess'") == 403
    assert [ln["name"] for ln in _layout(browser)["lines"]] == ["walkway", "aisle"]


def test_a_viewer_cannot_edit(site: Site, browser: Chrome) -> None:
    _login(browser, site, "victor")
    assert not browser.find_element(By.ID, "apply").is_enabled()
    assert not browser.find_element(By.ID, "add-line").is_enabled()
    assert _post_layout(browser, "App.me.csrf") == 403  # with the viewer's own valid token
    assert [ln["name"] for ln in _layout(browser)["lines"]] == ["walkway", "aisle"]


def _best_source_match(frame: np.ndarray) -> float:
    """PSNR of ``frame`` against the vtest.avi frame it is (found on small copies, compared at full size)."""
    video, small = cv2.VideoCapture(str(VTEST)), []
    while (got := video.read())[0]:
        small.append(cv2.resize(got[1], (96, 72), interpolation=cv2.INTER_AREA))
    target = cv2.resize(frame, (96, 72), interpolation=cv2.INTER_AREA)
    best = int(np.argmax([psnr(target, s) for s in small]))
    video = cv2.VideoCapture(str(VTEST))
    video.set(cv2.CAP_PROP_POS_FRAMES, best)
    return psnr(frame, video.read()[1])


def _colored(frames: np.ndarray, bgr: tuple[int, int, int]) -> np.ndarray:
    """Per frame, the pixels within 60 of ``bgr`` in every channel."""
    return np.all(np.abs(frames.astype(np.int16) - np.array(bgr, np.int16)) < 60, axis=-1)


def test_the_restream_serves_both_pictures_to_a_viewer_and_refuses_a_wrong_password(site: Site) -> None:
    raw_url, annotated_url = f"{site.rtsp}/hall", f"{site.rtsp}/hall/annotated"
    with pytest.raises(RuntimeError, match="401"):
        probe(raw_url.replace("rtsp://", "rtsp://victor:wrong@"))
    with pytest.raises(RuntimeError, match="401"):
        probe(raw_url)  # no login at all
    login = f"rtsp://victor:{USERS['victor'][1]}@"
    raw_grab = start_grab(raw_url.replace("rtsp://", login), 6)
    annotated_grab = start_grab(annotated_url.replace("rtsp://", login), 6)
    # vtest.avi is MPEG-4 part 2: /hall falls back to encoding its frames (passthrough is H.264/H.265), and says so
    wait_until(lambda: _healthz(site)["restream"]["cameras"]["hall"]["/hall"] == "x264", 30, 0.05,
               "/healthz to show /hall's client on the x264 encoder")
    stream, times = probe(annotated_url.replace("rtsp://", login))  # a second client of a running stream
    assert (stream["codec_name"], stream["width"], stream["height"]) == ("h264", 768, 576), stream
    assert abs(rate(times) - RESTREAM_FPS) <= 0.1 * RESTREAM_FPS, times
    raw, annotated = frames_of(raw_grab, 768, 576), frames_of(annotated_grab, 768, 576)
    assert len(raw) == 6 and len(annotated) == 6
    # The walkway line (x 560, y 220..420) is drawn in LINE_BGR on the annotated picture only; so are boxes.
    line = (slice(None), slice(260, 380), slice(558, 563))
    drawn = [_colored(frames[line], (0, 200, 255)).any(axis=-1).mean() for frames in (annotated, raw)]
    assert drawn[0] > 0.5 and drawn[1] < 0.05, drawn  # rows where the line shows (people walk over it)
    green = _colored(annotated, (0, 255, 0)).sum(axis=(1, 2))
    assert green.max() > 200 and _colored(raw, (0, 255, 0)).sum() < 50, green
    assert _best_source_match(raw[-1]) > 30  # the camera's own picture, H.264-compressed
    site.daemon.wait(lambda: site.daemon.log_path.read_text().count("has no client left: encoder stopped") >= 2, 30,
                     "both streams' encoders to stop once their clients left")


def test_the_overviews_filters_hide_what_they_filter(site: Site, browser: Chrome) -> None:
    _login(browser, site, "olga")
    browser.get(site.url)
    shown_names = "return [...document.querySelectorAll('#events li')].filter(li => li.offsetParent !== null)" \
        ".map(li => li.dataset.name)"
    wait_until(lambda: {"aisle", "walkway"} <= set(browser.execute_script(shown_names)), 60, 0.2,
               "events of both lines on the overview")
    browser.find_element(By.ID, "f-name").send_keys("aisle")
    names = browser.execute_script(shown_names)
    assert names and set(names) == {"aisle"}, names  # the walkway's are hidden, not merely marked hidden
    save_screenshot(browser, site.artifacts, "ui-overview-filtered.png")


def test_the_camera_view_shows_earlier_events_and_an_unknown_camera_is_a_404(site: Site, browser: Chrome) -> None:
    _login(browser, site, "olga")
    opened = time.time()
    browser.get(f"{site.url}/camera/hall")
    wait_until(lambda: browser.execute_script("return document.body.dataset.ready === '1'"), 20, 0.1, "the view")
    earlier = browser.execute_script("return [...document.querySelectorAll('#events li')]"
                                     ".filter(li => Number(li.dataset.time) < arguments[0]).length", opened)
    assert earlier > 0, "the view lists the camera's events from before it was opened"
    browser.get(f"{site.url}/camera/no-such-cam")
    assert browser.find_element(By.ID, "not-found").text == "No camera 'no-such-cam'"
    assert "hall" in browser.find_element(By.TAG_NAME, "main").text
    assert get(f"{site.url}/events/0123.jpg").status == 401  # no login: no camera images either


def test_the_events_page_filters_and_pages_through_500_events(site: Site, browser: Chrome) -> None:
    start = 1_800_000_000.0
    with page_with_events(site.root / "events-page", {"hall": 500, "yard": 120}, start) as port:
        browser.get(f"http://127.0.0.1:{port}/events?camera=hall")
        seen: list[float] = []
        for _ in range(20):
            wait_until(lambda: browser.execute_script("return document.body.dataset.ready === '1'"), 20, 0.1,
                       "a page of events")
            rows = browser.execute_script("return [...document.querySelectorAll('#events li')]"
                                          ".map(li => [li.dataset.camera, Number(li.dataset.time)])")
            assert rows and {camera for camera, _ in rows} == {"hall"}, rows[:3]
            seen.extend(t for _, t in rows)
            older = browser.find_element(By.ID, "older")
            if not older.is_enabled():
                break
            here = browser.current_url
            older.click()
            wait_until(lambda: browser.current_url != here, 10, 0.05, "the next page's address")
        assert seen == [start + n for n in range(500, 0, -1)]  # every one, newest first, none twice
        save_screenshot(browser, site.artifacts, "ui-events.png")
        browser.get(f"http://127.0.0.1:{port}/events")
        wait_until(lambda: browser.execute_script("return document.body.dataset.ready === '1'"), 20, 0.1, "events")
        Select(browser.find_element(By.ID, "f-type")).select_by_visible_text("cross")
        browser.find_element(By.ID, "f-name").send_keys("walkway")
        browser.find_element(By.ID, "f-apply").click()
        wait_until(lambda: "type=cross" in browser.current_url, 10, 0.05, "the filtered address")
        wait_until(lambda: browser.execute_script("return document.body.dataset.ready === '1'"), 20, 0.1, "events")
        kinds = browser.execute_script("return [...document.querySelectorAll('#events li')]"
                                       ".map(li => li.dataset.type + ' ' + li.dataset.name)")
        assert kinds and set(kinds) == {"cross walkway"}, kinds[:5]
        assert "of 155 matching" in browser.find_element(By.ID, "summary").text  # 125 of hall's, 30 of yard's


def test_slow_bodies_and_many_streams_leave_healthz_alone(site: Site) -> None:
    port = int(urllib.parse.urlsplit(site.url).port or 0)
    cookie, header = login_cookie(site.url, "victor", USERS["victor"][1])
    assert "Max-Age=28800" in header and "HttpOnly" in header and "Secure" not in header, header  # plain http
    with HealthPoller(site.url) as poller:
        streams, stream_statuses = open_streams(port, "127.0.0.3", cookie, 100)
        try:
            statuses = slow_bodies(port, "127.0.0.2", 40, limits.BODY_DEADLINE_S + 4)
        finally:
            for sock in streams:
                sock.close()
    assert poller.failures == [] and poller.answered >= 10, (poller.failures[:5], poller.answered)
    assert stream_statuses.count("200") == STREAMS_PER_SESSION, stream_statuses
    assert set(stream_statuses) <= {"200", "429", "503", "RESET"}, stream_statuses
    assert statuses.count("408") >= limits.REQUESTS_PER_CLIENT and set(statuses) <= {"408", "429", "503", "RESET"}, \
        statuses  # each held body cut at the deadline; the ones past the caps refused at once
    log = site.daemon.log_path.read_text()
    assert log.count("refused a slow request body from 127.0.0.2") == 1, "one line per burst"


def _post_json(site: Site, cookie: str, csrf: str, body: bytes) -> tuple[int, bytes, float]:
    address = urllib.parse.urlsplit(site.url)
    conn = http.client.HTTPConnection(address.hostname, address.port, timeout=60)
    started = time.monotonic()
    try:
        conn.request("POST", "/api/cameras/hall/layout", body, {"Content-Type": "application/json",
                     "X-CSRF-Token": csrf, "Cookie": f"appliance_session={cookie}"})
        response = conn.getresponse()
        return response.status, response.read(), time.monotonic() - started
    except (BrokenPipeError, ConnectionResetError):  # refused before all was sent: the answer may be lost
        return 413, b"", time.monotonic() - started
    finally:
        conn.close()


def test_a_huge_layout_is_refused_at_once_with_a_short_message(site: Site) -> None:
    cookie, _header = login_cookie(site.url, "olga", USERS["olga"][1])
    overview = get(f"{site.url}/api/overview", headers={"Cookie": f"appliance_session={cookie}"}, timeout=30,
                   expect=200)
    csrf = overview.json()["me"]["csrf"]
    walkway = {"name": "walkway", "a": [10, 300], "b": [700, 300], "in_side": "left"}
    zone = {"name": "floor", "points": [[i % 700, (i * 7) % 500] for i in range(100_000)]}
    huge_name = {"name": "n" * 10_000_000, "a": [10, 300], "b": [700, 300], "in_side": "left"}
    before = len(site.daemon.log_path.read_text().splitlines())
    for doc in ({"zones": [zone], "lines": []}, {"zones": [], "lines": [huge_name]}):
        status, body, took = _post_json(site, cookie, csrf, json.dumps(doc).encode())
        assert status == 413 and len(body) < 200 and took < 5, (status, body[:200], took)
    smaller = [({"zones": [{**zone, "points": zone["points"][:5000]}], "lines": []}, "at most 256 items"),
               ({"zones": [], "lines": [{**huge_name, "name": "n" * 100_000}]}, "100000 characters"),
               ({"zones": [], "lines": [{**walkway, "a": ["10", 300]}]}, "valid number")]
    for doc, words in smaller:
        status, body, took = _post_json(site, cookie, csrf, json.dumps(doc).encode())
        assert status == 422 and words in body.decode() and len(body) < 1000 and took < 5, (status, body[:300])
    def log() -> list[str]:  # the daemon's log file is written by its own process, a moment after the answer
        return site.daemon.log_path.read_text().splitlines()[before:]

    wait_until(lambda: sum("not applied" in line for line in log()) >= 3
               and any("refused a request too large" in line for line in log()), 10, 0.1,
               "the refusals' log lines")
    log_lines = log()
    assert [len(line) < 400 for line in log_lines if "not applied" in line] == [True] * 3
    assert sum("refused a request too large" in line for line in log_lines) == 1
    assert [ln["name"] for ln in _layout_of(site, cookie)["lines"]] == ["walkway", "aisle"]  # nothing applied


def _layout_of(site: Site, cookie: str) -> dict:
    return dict(get(f"{site.url}/api/cameras/hall/layout", headers={"Cookie": f"appliance_session={cookie}"},
                    timeout=30, expect=200).json())


def test_failed_logins_are_held_back_and_logged_once(site: Site) -> None:
    port = urllib.parse.urlsplit(site.url).port
    codes = []
    for _ in range(8):  # from an address of its own: the browser's logins are not held back after it
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=("127.0.0.4", 0))
        conn.request("POST", "/login", "name=mallory&password=guess", {"Content-Type":
                                                                         "application/x-www-form-urlencoded"})
        codes.append(conn.getresponse().status)
        conn.close()
    assert codes == [303] * 5 + [429] * 3, codes
    log = site.daemon.log_path.read_text()
    assert log.count("failed logins for name 'mallory'") == 1 and log.count("failed login for 'mallory'") == 5


def _healthz(site: Site) -> dict:
    return dict(get(f"{site.url}/healthz", expect=200).json())  # open without a login


def test_the_applied_layout_survives_a_restart_and_status_names_it(site: Site) -> None:
    layout = _healthz(site)["analytics"]["hall"]["layout"]
    assert "applied on the page at" in layout and "olga" not in layout, layout  # no user names without a login
    assert site.daemon.terminate() == 0, site.daemon.tail()
    site.daemon.close()
    (site.root / "restarted").mkdir()
    site.daemon = RunningDaemon(site.root / "restarted", site.config, REPO)
    assert site.daemon.notify.wait_for("READY=1", 240), site.daemon.tail()
    hall = _healthz(site)["analytics"]["hall"]
    assert set(hall["lines"]) == {"walkway", "aisle"}, hall
    assert hall["layout"].startswith(str(site.state_dir / "layouts" / "hall.json")), hall["layout"]
    assert "camera hall: zones and lines from" in site.daemon.log_path.read_text()


def test_a_removed_layout_file_is_named_as_removed(site: Site) -> None:
    (site.state_dir / "layouts" / "hall.json").unlink()
    layout = _healthz(site)["analytics"]["hall"]["layout"]
    assert layout.startswith(f"{site.state_dir / 'layouts' / 'hall.json'} was removed: the config file's zones and "
                             "lines from the next restart"), layout
