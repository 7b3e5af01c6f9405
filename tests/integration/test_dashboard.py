"""The dashboard without a browser: its vendored files, its sessions, CSRF and CSP,
its panels' presentation, and its stream's fan-out (one read of the cluster per
change, however many pages are open), over real SQLite files and a real uvicorn
server. The browser's side is tests/integration/test_dashboard_browser.py."""

from __future__ import annotations

import hashlib
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Literal

import httpx
import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

import corral
from corral.clock import FakeClock
from corral.cockpit import score_parts
from corral.dashboard import Dashboard
from corral.dashboard.feed import TASKS_SHOWN, Feed, Snapshot, read_snapshot
from corral.dashboard.pages import CSP
from corral.dashboard.session import COOKIE, Session, Sessions
from corral.dashboard.views import (
    NODES_SHOWN,
    PANELS,
    TASKS_PAGE,
    Filters,
    environment,
    heartbeat,
    render_panel,
)
from corral.model import Node, Task
from corral.scoring import score
from corral.server import create_app
from corral.server.app import ServerState
from corral.server.auth import Tokens
from tests.support.backends.http import TOKEN, free_port, start_uvicorn, stop_uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from dashboard_bench import Counting

STATIC = Path(corral.__file__).parent / "dashboard" / "static"
TEMPLATES = Path(corral.__file__).parent / "dashboard" / "templates"
VENDORED = {"htmx.min.js", "htmx.LICENSE", "htmx-ext-sse.min.js", "htmx-ext-sse.LICENSE"}


# --- vendored files, no CDN, no inline script or style ---------------------------------
def test_the_vendored_files_match_their_committed_checksums() -> None:
    """htmx and its SSE extension (and their licences) are byte for byte the files
    SHA256SUMS names; the README names their versions and sources."""
    manifest = {}
    for line in (STATIC / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        manifest[name] = digest
    assert set(manifest) == VENDORED
    for name, digest in manifest.items():
        assert hashlib.sha256((STATIC / name).read_bytes()).hexdigest() == digest, name
    readme = (STATIC / "README.md").read_text()
    for needed in ("htmx.org 2.0.11", "htmx-ext-sse 2.2.4", "registry.npmjs.org"):
        assert needed in readme
    assert "BSD" in (STATIC / "htmx.LICENSE").read_text()
    assert "BSD" in (STATIC / "htmx-ext-sse.LICENSE").read_text()


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.script_text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.script_text.append(data)


def test_templates_load_nothing_from_elsewhere_and_inline_nothing() -> None:
    """Every script and stylesheet is a file of the package's static directory; no
    template has an inline script, a style element or attribute, or an on* handler
    (the CSP would refuse them), and none names another host."""
    for path in TEMPLATES.rglob("*.html"):
        text = path.read_text()
        assert "http://" not in text and "https://" not in text, path
        parser = _Tags()
        parser.feed(text)
        assert parser.script_text == [], path
        for tag, attrs in parser.tags:
            assert tag != "style", path
            assert "style" not in attrs, (path, tag)
            assert not [a for a in attrs if a.startswith("on")], (path, tag)
            if tag == "script":
                assert str(attrs["src"]).startswith("{{ static }}/"), path
                assert (STATIC / str(attrs["src"]).split("/")[-1]).is_file()
            if tag == "link" and attrs.get("rel") == "stylesheet":
                assert (STATIC / str(attrs["href"]).split("/")[-1]).is_file()


# --- the app: sessions, CSRF, CSP ------------------------------------------------------
@pytest.fixture
def app_client(tmp_path: Path) -> Iterator[TestClient]:
    cluster = corral.connect(f"sqlite:///{tmp_path / 'c.db'}")
    app = create_app(cluster, token=TOKEN, monitor=False, mcp=False)
    with TestClient(app, base_url="http://testserver", follow_redirects=False) as client:
        yield client
    cluster.close()


def _log_in(client: TestClient, token: str = TOKEN, **form: str) -> httpx2.Response:
    return client.post(
        "/login", data={"token": token, **form}, headers={"Origin": "http://testserver"}
    )


def test_without_a_session_every_page_fragment_and_stream_is_refused(
    app_client: TestClient,
) -> None:
    """``/`` redirects to the login page (keeping where it was going); a fragment and
    the stream are 401; a forged or altered cookie is no session."""
    page = app_client.get("/?node_status=idle")
    assert page.status_code == 303
    assert page.headers["location"] == "/login?next=%2F%3Fnode_status%3Didle"
    for path in ("/dashboard/panels/fleet", "/dashboard/panels/nodes", "/dashboard/stream"):
        assert app_client.get(path).status_code == 401, path
    forged = Sessions(secret=b"someone else's key").issue("operator")[1]
    for cookie in (forged, "junk", "a.b", _log_in(app_client).cookies[COOKIE] + "x"):
        app_client.cookies.clear()
        app_client.cookies.set(COOKIE, cookie)
        assert app_client.get("/dashboard/panels/fleet").status_code == 401, cookie
        assert app_client.get("/").status_code == 303


def test_login_exchanges_the_token_for_a_strict_httponly_cookie(app_client: TestClient) -> None:
    """The cookie is HttpOnly, SameSite=Strict, expiring, and does not carry the
    token; the page is then served with the strict CSP."""
    answer = _log_in(app_client, next="/?event_kind=task_added")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/?event_kind=task_added"
    header = answer.headers["set-cookie"]
    assert "HttpOnly" in header and "SameSite=strict" in header and "Max-Age=28800" in header
    assert "Path=/" in header
    value = answer.cookies[COOKIE]
    assert TOKEN not in value and TOKEN not in __import__("base64").b64decode(
        value.split(".")[0] + "=="
    ).decode("utf-8", "replace")
    page = app_client.get("/")
    assert page.status_code == 200
    assert page.headers["content-security-policy"] == CSP
    assert "'unsafe-inline'" not in CSP and "script-src 'self'" in CSP
    assert "style-src 'self'" in CSP
    for name in ("Fleet", "Nodes", "Tasks", "Events"):
        assert re.search(rf"<h2 id=\"\w+-title\">{name}</h2>", page.text), name


def test_login_refuses_wrong_tokens_node_tokens_other_sites_and_far_redirects(
    app_client: TestClient,
) -> None:
    wrong = _log_in(app_client, "nope")
    assert wrong.status_code == 401 and "not valid" in wrong.text
    node = _log_in(app_client, Tokens(TOKEN).node_token("w1"))
    assert node.status_code == 401 and "operator token" in node.text
    assert COOKIE not in app_client.cookies
    elsewhere = app_client.post(
        "/login", data={"token": TOKEN}, headers={"Origin": "http://evil.example"}
    )
    assert elsewhere.status_code == 403
    for target in ("//evil.example/x", "http://evil.example/", "javascript:alert(1)"):
        app_client.cookies.clear()
        assert _log_in(app_client, next=target).headers["location"] == "/", target


def test_a_post_without_its_csrf_token_is_refused(app_client: TestClient) -> None:
    """Logging out (the one action yet) needs the session's CSRF token, as a header
    or a form field; without it, or with another session's, 403 and still logged in."""
    _log_in(app_client)
    page = app_client.get("/")
    token = re.search(r'<meta name="csrf-token" content="([^"]+)">', page.text)
    assert token
    assert app_client.post("/logout").status_code == 403
    assert app_client.post("/logout", data={"csrf": "x" + token[1]}).status_code == 403
    assert app_client.post("/logout", headers={"X-CSRF-Token": ""}).status_code == 403
    assert app_client.get("/dashboard/panels/fleet").status_code == 200
    out = app_client.post("/logout", data={"csrf": token[1]})
    assert out.status_code == 303 and out.headers["location"] == "/login"


def test_a_logged_out_cookie_is_refused_even_when_replayed(app_client: TestClient) -> None:
    """Logging out forgets the session: its cookie, sent again, is no session."""
    _log_in(app_client)
    cookie = app_client.cookies[COOKIE]
    token = re.search(r'<meta name="csrf-token" content="([^"]+)">', app_client.get("/").text)
    assert token
    assert app_client.post("/logout", headers={"X-CSRF-Token": token[1]}).status_code == 303
    app_client.cookies.set(COOKIE, cookie)
    assert app_client.get("/dashboard/panels/fleet").status_code == 401


def test_a_viewer_is_refused_every_action_and_an_operator_is_not(tmp_path: Path) -> None:
    """The gate every dashboard action goes through: no session 401, no CSRF token
    403, a viewer's session 403 even with its token, the operator's passes."""
    cluster = corral.connect(f"sqlite:///{tmp_path / 'c.db'}")
    assert isinstance(cluster, corral.Cluster)  # a database URL gives the embedded client
    sessions = Sessions(secret=b"k")
    dash = Dashboard(ServerState(cluster, Tokens(TOKEN)), sessions=sessions)

    async def act(request: Request, session: Session) -> Response:
        return PlainTextResponse(f"done by {session.role}")

    app = Starlette(routes=[Route("/act", dash.action(act), methods=["POST"])])
    with TestClient(app) as client:
        assert client.post("/act").status_code == 401
        roles: tuple[tuple[Literal["viewer", "operator"], int], ...] = (
            ("viewer", 403),
            ("operator", 200),
        )
        for role, status in roles:
            session, cookie = sessions.issue(role)
            client.cookies.set(COOKIE, cookie)
            assert client.post("/act").status_code == 403
            csrf = {"X-CSRF-Token": sessions.csrf_token(session)}
            answer = client.post("/act", headers=csrf)
            assert answer.status_code == status, role
    assert answer.text == "done by operator"
    cluster.close()


def test_sessions_expire_by_the_injected_clock() -> None:
    now = [1000.0]
    sessions = Sessions(secret=b"k", lifetime=60, clock=lambda: now[0])
    session, cookie = sessions.issue("operator")
    assert sessions.check(cookie) == session and session.may_act
    now[0] = 1059.9
    assert sessions.check(cookie) is not None
    now[0] = 1060.0
    assert sessions.check(cookie) is None
    other, _ = sessions.issue("viewer")
    assert sessions.csrf_token(other) != sessions.csrf_token(session)
    assert not other.may_act


# --- presentation ----------------------------------------------------------------------
def _snapshot(tmp_path: Path, clock: FakeClock) -> Snapshot:
    with corral.connect(f"sqlite:///{tmp_path / 'p.db'}", clock=clock) as c:
        return read_snapshot(c, 0, c.events(0, 100))  # type: ignore[arg-type]


def test_heartbeat_age_is_coloured_against_the_nodes_own_threshold(tmp_path: Path) -> None:
    """ok within one of its intervals, late past it, overdue past its liveness
    window (missed_beats intervals): a 10 s node is overdue where a 300 s one is ok."""
    clock = FakeClock(10_000.0)
    snap = _snapshot(tmp_path, clock)
    fast = Node("fast", "developer", "idle", heartbeat_interval=10, registered_at=0)
    slow = Node("slow", "developer", "idle", heartbeat_interval=300, registered_at=0)
    states = {}
    for silence in (5, 15, 31):
        snap.now = silence
        states[silence] = (heartbeat(fast, snap)["state"], heartbeat(slow, snap)["state"])
    assert states == {5: ("ok", "ok"), 15: ("late", "ok"), 31: ("overdue", "ok")}
    assert heartbeat(fast, snap)["window"] == "30 s"
    gone = Node("gone", "developer", "terminated", heartbeat_interval=10)
    assert heartbeat(gone, snap)["state"] == "ended"


def test_a_pending_tasks_score_parts_add_up_to_the_scoring_rule(tmp_path: Path) -> None:
    task = Task(7, "Fix tests", "high", "pending", roles=("developer",), created_at=100.0)
    parts = score_parts(task, now=100.0 + 600)
    assert (parts["priority"], parts["bonus"], parts["roles"]) == (30, 15, "developer")
    assert parts["score"] == pytest.approx(score("high", False, 100.0, 700.0))
    assert parts["score"] + parts["bonus"] == pytest.approx(score("high", True, 100.0, 700.0))


def test_the_nodes_panel_hides_terminated_nodes_unless_asked(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    with corral.connect(f"sqlite:///{tmp_path / 'f.db'}", clock=clock) as c:
        c.register_node("alive", "developer")
        c.register_node("gone", "developer")
        c.terminate_node("gone")
    env = environment()
    with corral.connect(f"sqlite:///{tmp_path / 'f.db'}", clock=clock) as c:
        snap = read_snapshot(c, 0, [])  # type: ignore[arg-type]

    def shown(**query: str) -> set[str]:
        html = render_panel(env, "nodes", snap, Filters.from_query(query))
        return set(re.findall(r'data-node="([^"]+)"', html))

    assert shown() == {"alive"}
    assert shown(node_status="terminated") == {"gone"}
    assert shown(node_status="all") == {"alive", "gone"}
    assert shown(node_status="idle") == {"alive"}
    assert shown(node_status="<script>") == {"alive"}  # an unknown filter is the default
    assert Filters.from_query({"node_status": "idle", "event_kind": "x"}).query() == (
        "node_status=idle&event_kind=x"
    )


def test_the_nodes_panel_shows_a_page_with_the_count_and_the_way_to_more(
    tmp_path: Path,
) -> None:
    """With more nodes than a page (NODES_SHOWN), the panel renders the first ones in
    registration order, says how many the filter chooses, and links to the next page
    and to all of them (``node_limit`` in the URL, kept by the other filters' forms);
    a status filter counts and pages what it chooses."""
    clock = FakeClock(1000.0)
    total = NODES_SHOWN + 30
    with corral.connect(f"sqlite:///{tmp_path / 'n.db'}", clock=clock) as c:
        c.configure(max_agents=total)
        for i in range(total):
            c.register_node(f"n{i:03d}", "developer")
        c.set_agent_status("n005", "waiting")
        snap = read_snapshot(c, 0, [])  # type: ignore[arg-type]
    env = environment()

    def panel(**query: str) -> tuple[list[str], str]:
        html = render_panel(env, "nodes", snap, Filters.from_query(query))
        return re.findall(r'data-node="([^"]+)"', html), html

    shown, html = panel()
    assert shown == [f"n{i:03d}" for i in range(NODES_SHOWN)]
    assert f"The first {NODES_SHOWN} of {total} nodes, in registration order" in html
    assert f'href="/?node_limit={2 * NODES_SHOWN}#nodes-title">show 30 more' in html
    assert f'href="/?node_limit={total}#nodes-title">show all {total}' in html
    shown, html = panel(node_limit=str(total))
    assert len(shown) == total and "show all" not in html
    shown, html = panel(node_status="waiting")
    assert shown == ["n005"] and "1 node</caption>" in html
    for bad in ("0", "-1", "x", "10000000"):
        assert Filters.from_query({"node_limit": bad}).node_limit == ""
    f = Filters.from_query({"node_limit": "200", "idle_minutes": "5"})
    assert ("node_limit", "200") in f.hidden()
    assert ("node_limit", "200") not in f.hidden("node_limit")  # the status form starts over


def test_the_tasks_panel_shows_a_page_of_each_list_and_the_way_to_every_task_read(
    tmp_path: Path,
) -> None:
    """Each list shows its first TASKS_PAGE tasks (pending ones in claim order) with
    the list's count and a link (``tasks_shown``) to every task the feed read of it;
    a list the page holds whole has neither."""
    clock = FakeClock(1000.0)
    with corral.connect(f"sqlite:///{tmp_path / 't.db'}", clock=clock) as c:
        c.add_tasks([{"title": f"Task {i}"} for i in range(TASKS_PAGE + 5)])
        c.register_node("w", "developer")
        c.claim_best_task("w", "developer")
        snap = read_snapshot(c, 0, [])  # type: ignore[arg-type]
    env = environment()

    def panel(**query: str) -> tuple[list[str], str]:
        html = render_panel(env, "tasks", snap, Filters.from_query(query))
        return re.findall(r'data-list="pending".*?</table>', html, re.S), html

    [pending], html = panel()
    assert pending.count("data-task=") == TASKS_PAGE
    assert f"The first {TASKS_PAGE} of {TASKS_PAGE + 4}, in the order they will be claimed" in html
    assert f'href="/?tasks_shown={TASKS_SHOWN}#tasks-title">show {TASKS_PAGE + 4}</a>' in html
    assert html.count('class="more"') == 1  # the one task in progress is shown whole
    [pending], html = panel(tasks_shown=str(TASKS_SHOWN))
    assert pending.count("data-task=") == TASKS_PAGE + 4 and 'class="more"' not in html
    assert Filters.from_query({"tasks_shown": str(TASKS_SHOWN + 1)}).tasks_shown == ""


# --- the stream: one feed, fanned out ----------------------------------------------------
# The reads of the Processes, Pools, Workflows and Activations panels.
_PANEL_READS = (
    "list_processes",
    "spawn_requests",
    "list_handlers",
    "list_agents",
    "list_assignments",
)


class _Counting(Counting):
    """The bench's counting cluster, with the snapshot's reads picked out."""

    def snapshot_reads(self) -> Counter[str]:
        with self._lock:
            names = ("settings", "stats", "read_state", "list_nodes", "list_tasks", *_PANEL_READS)
            return Counter({n: self.calls[n] for n in names})


class _Page(threading.Thread):
    """One open page's stream: the ids and event names it received."""

    def __init__(self, base: str, cookie: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(daemon=True)
        self.base, self.cookie, self.headers = base, cookie, headers or {}
        self.ids: list[int] = []
        self.names: list[str] = []
        self.comments = 0
        self.opened = threading.Event()
        self.stop = False

    def run(self) -> None:
        with (
            httpx.Client(cookies={COOKIE: self.cookie}, timeout=30) as client,
            client.stream("GET", self.base + "/dashboard/stream", headers=self.headers) as r,
        ):
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            self.opened.set()
            for line in r.iter_lines():
                if self.stop:
                    return
                if line.startswith("id: "):
                    self.ids.append(int(line[4:]))
                elif line.startswith("event: "):
                    self.names.append(line[7:])
                elif line.startswith(":"):
                    self.comments += 1


def _until(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.fixture
def counted_server(tmp_path: Path) -> Iterator[tuple[str, _Counting, str]]:
    """The dashboard on a real server over a counted cluster; its feed re-reads only
    on events (no timed refresh), polling the event log every 50 ms."""
    cluster = corral.connect(f"sqlite:///{tmp_path / 's.db'}")
    counting = _Counting(cluster)
    st = ServerState(counting, Tokens(TOKEN), sse_poll=0.05)  # type: ignore[arg-type]
    sessions = Sessions(secret=b"k")
    dash = Dashboard(st, sessions=sessions, feed=Feed(st, refresh=3600))
    port = free_port()
    server, thread = start_uvicorn(Starlette(routes=dash.routes()), port)
    try:
        yield f"http://127.0.0.1:{port}", counting, sessions.issue("operator")[1]
    finally:
        stop_uvicorn(server, thread)
        st.shutdown()
        cluster.close()


def _reads_for_one_change(base: str, counting: _Counting, cookie: str, pages: int) -> Any:
    open_pages = [_Page(base, cookie) for _ in range(pages)]
    for p in open_pages:
        p.start()
    _until(lambda: all(p.ids for p in open_pages), 10, "every page's first panels")
    before = counting.snapshot_reads()
    cluster = counting.unwrapped
    cluster.register_node(f"fan-{pages}", "developer")
    last = cluster.events(0, 10_000)[-1].seq
    _until(lambda: all(p.ids[-1] >= last for p in open_pages), 5, "the change on every page")
    reads = counting.snapshot_reads() - before
    for p in open_pages:
        p.stop = True
    assert all(p.names[: len(PANELS)] == list(PANELS) for p in open_pages)
    # A page reads until its next line: one more change ends every stream now (the
    # server's shutdown otherwise waited 10 s on them).
    cluster.register_node(f"end-{pages}", "developer")
    for p in open_pages:
        p.join(10)
    assert not any(p.is_alive() for p in open_pages)
    return reads


def test_fifty_open_pages_cost_the_cluster_the_reads_of_one(
    counted_server: tuple[str, _Counting, str],
) -> None:
    """A change reaches every open page's stream (named events per panel, ``id:`` the
    event's seq) and costs one snapshot read, with 1 page open or with 50; the feed
    calls only reading operations."""
    base, counting, cookie = counted_server
    one = _reads_for_one_change(base, counting, cookie, 1)
    fifty = _reads_for_one_change(base, counting, cookie, 50)
    assert one == fifty
    # Each read once: stats holds every count and the last assessment, so the
    # snapshot needs no read_state (its nodes and counts again).
    assert (one["list_nodes"], one["stats"], one["read_state"]) == (1, 1, 0)
    # The dashboard only reads: it never assesses (a write) or changes anything.
    assert set(counting.calls) <= {
        "settings",
        "stats",
        "list_nodes",
        "list_tasks",
        "events",
        *_PANEL_READS,
    }
    for name in _PANEL_READS:  # the other panels' reads: one each per change, too
        assert one[name] == 1, name


def test_a_resumed_stream_skips_what_it_has_and_pings_while_quiet(tmp_path: Path) -> None:
    """With ``Last-Event-ID`` at the feed's newest event, the stream sends no panels
    until something changes; a quiet stream sends ping comments."""
    cluster = corral.connect(f"sqlite:///{tmp_path / 'r.db'}")
    assert isinstance(cluster, corral.Cluster)  # a database URL gives the embedded client
    st = ServerState(cluster, Tokens(TOKEN), sse_poll=0.05)
    sessions = Sessions(secret=b"k")
    dash = Dashboard(st, sessions=sessions, ping=0.2)
    cluster.register_node("first", "developer")
    now_seq = max(e.seq for e in cluster.events(0, 100))
    port = free_port()
    server, thread = start_uvicorn(Starlette(routes=dash.routes()), port)
    try:
        _, cookie = sessions.issue("operator")
        page = _Page(f"http://127.0.0.1:{port}", cookie, {"Last-Event-ID": str(now_seq)})
        page.start()
        _until(lambda: page.comments >= 2, 5, "two pings")
        assert page.ids == [] and page.names == []
        fresh = _Page(f"http://127.0.0.1:{port}", cookie)
        fresh.start()
        _until(lambda: bool(fresh.ids), 5, "a new page's panels")
        assert fresh.ids == [now_seq]
        page.stop = fresh.stop = True
    finally:
        stop_uvicorn(server, thread)
        cluster.close()


def test_a_session_holds_across_servers_with_the_same_operator_token(tmp_path: Path) -> None:
    """The cookie's key derives from the operator token: another process serving the
    cluster with that token (a restart, a ``--workers`` sibling) accepts the
    session; one with another token does not."""
    cluster = corral.connect(f"sqlite:///{tmp_path / 'c.db'}")

    def app(token: str) -> Any:
        return create_app(cluster, token=token, monitor=False, mcp=False)

    with TestClient(app(TOKEN), follow_redirects=False) as first:
        cookie = _log_in(first).cookies[COOKIE]
    with TestClient(app(TOKEN), follow_redirects=False) as again:
        again.cookies.set(COOKIE, cookie)
        assert again.get("/dashboard/panels/fleet").status_code == 200
    with TestClient(app("other"), follow_redirects=False) as other:
        other.cookies.set(COOKIE, cookie)
        assert other.get("/dashboard/panels/fleet").status_code == 401
    cluster.close()


def test_a_page_after_a_long_quiet_reads_only_the_newest_events(tmp_path: Path) -> None:
    """With no page open, the feed does not follow the log: the next page's first
    read starts from the newest events (one batch), not from where the last page
    left off."""
    import asyncio

    cluster = corral.connect(f"sqlite:///{tmp_path / 'q.db'}")
    counting = _Counting(cluster)
    st = ServerState(counting, Tokens(TOKEN))  # type: ignore[arg-type]
    feed = Feed(st)
    first = asyncio.run(feed.current())
    cluster.add_tasks([{"title": f"t{i}"} for i in range(1500)])
    counting.calls.clear()
    later = asyncio.run(feed.current())
    assert counting.calls["events"] == 1
    assert later.seq == first.seq + 1500
    assert [e.seq for e in later.events] == list(range(later.seq - 199, later.seq + 1))
    st.shutdown()
    cluster.close()


def test_what_the_cluster_holds_is_escaped_on_the_page(tmp_path: Path) -> None:
    """A task title or event data with markup in it is shown as text, never run."""
    cluster = corral.connect(f"sqlite:///{tmp_path / 'x.db'}")
    cluster.add_task('<script>alert("x")</script><img src=x onerror=alert(1)>')
    app = create_app(cluster, token=TOKEN, monitor=False, mcp=False)
    with TestClient(app, base_url="http://testserver", follow_redirects=False) as client:
        _log_in(client)
        for body in (client.get("/").text, client.get("/dashboard/panels/tasks").text):
            assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&lt;img" in body
            assert "<script>alert" not in body and "<img" not in body
    cluster.close()
