"""The remote client's transport: keep-alive connections for the client's threads,
the one re-send of a request whose reused connection the server had closed (and no
other), per-call timeouts, TLS, ``close()``, and the error envelope mapped back to
``corral.errors``. Real sockets: a scripted server speaks HTTP/1.1 byte by byte, and
the last test runs a real ``corral serve`` app. (Written against the behaviour, not
the implementation: the same tests held for the urllib3 transport that
``bench/http_pace.py`` compares.)"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from corral.errors import (
    CorralError,
    InvalidInputError,
    LeaseError,
    NotFoundError,
    StoreUnavailableError,
)
from corral.remote import HttpClient
from tests.support.backends.http import TOKEN, serving


def _ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def _wait_for(cond: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


class Peer:
    """One accepted connection as the script sees it."""

    def __init__(self, sock: socket.socket, server: ScriptServer) -> None:
        self.sock = sock
        self.server = server
        self.buf = b""

    def read_request(self) -> bytes | None:
        """The next request (head and body), or None when the client closed."""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(self.buf) < length:
            self.buf += self.sock.recv(65536)
        body, self.buf = self.buf[:length], self.buf[length:]
        request = head + b"\r\n\r\n" + body
        with self.server.lock:
            self.server.requests.append(request)
        return request

    def wait_readable(self) -> None:
        """Block until the client has sent something (or closed)."""
        self.sock.setblocking(True)
        self.sock.recv(1, socket.MSG_PEEK)


class ScriptServer:
    """Accepts connections and runs ``script(peer, n)`` for the n-th (from 0), each on
    its own thread; records every request read and counts connections."""

    def __init__(
        self, script: Callable[[Peer, int], None], *, tls: ssl.SSLContext | None = None
    ) -> None:
        self.script = script
        self.tls = tls
        self.lock = threading.Lock()
        self.requests: list[bytes] = []
        self.connections = 0
        self.ended = 0  # connections whose script has returned (the socket closed)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                n = self.connections
                self.connections += 1
            threading.Thread(target=self._run, args=(sock, n), daemon=True).start()

    def _run(self, sock: socket.socket, n: int) -> None:
        try:
            if self.tls is not None:
                sock = self.tls.wrap_socket(sock, server_side=True)
            with sock:
                self.script(Peer(sock, self), n)
        except OSError:
            pass
        finally:
            with self.lock:
                self.ended += 1

    def close(self) -> None:
        self.sock.close()


@contextmanager
def scripted(
    script: Callable[[Peer, int], None], *, tls: ssl.SSLContext | None = None
) -> Iterator[ScriptServer]:
    server = ScriptServer(script, tls=tls)
    try:
        yield server
    finally:
        server.close()


def _answer_each(body: Callable[[bytes], bytes]) -> Callable[[Peer, int], None]:
    """A keep-alive script: every request answered with ``body(request)``."""

    def script(peer: Peer, n: int) -> None:
        while (req := peer.read_request()) is not None:
            peer.sock.sendall(_ok(body(req)))

    return script


# --- the one re-send ------------------------------------------------------------------
@pytest.mark.parametrize("how", ["read", "unread"])
def test_a_request_on_a_reused_connection_the_server_closed_is_sent_again_once(
    how: str,
) -> None:
    """The server ends an idle keep-alive connection just as the next request arrives
    (after reading it: end of stream; without reading it: a reset): the client sends
    that request again on a new connection and returns its answer."""

    def script(peer: Peer, n: int) -> None:
        if n == 0:
            peer.read_request()
            peer.sock.sendall(_ok(b"1"))
            if how == "read":
                peer.read_request()
            else:
                peer.wait_readable()  # the request is in, unread: closing resets
            return
        peer.read_request()
        peer.sock.sendall(_ok(b"2"))

    with scripted(script) as server, HttpClient(f"http://127.0.0.1:{server.port}", token="t") as c:
        assert c.request("POST", "/a", {"k": 1}) == 1
        assert c.request("POST", "/b", {"k": 2}) == 2
        assert server.connections == 2
        sent = [r.split(b" ", 2)[1] for r in server.requests]
        assert sent[0] == b"/a" and sent[-1] == b"/b"
        assert len(sent) == (3 if how == "read" else 2)  # /b arrived twice when read


def test_a_new_connection_closed_without_an_answer_is_not_sent_again() -> None:
    """A request on a fresh connection that ends with no answer may have been done:
    it is not repeated, and the caller gets StoreUnavailableError."""

    def script(peer: Peer, n: int) -> None:
        peer.read_request()  # and close without answering

    with scripted(script) as server, HttpClient(f"http://127.0.0.1:{server.port}", token="t") as c:
        with pytest.raises(StoreUnavailableError, match="lost the connection"):
            c.request("POST", "/v1/nodes/w1/claim", {"role": "r"})
        assert server.connections == 1 and len(server.requests) == 1


def test_an_answer_cut_short_is_not_sent_again() -> None:
    """Part of the answer arrived on a reused connection, then it ended: the request
    was done, so it is not repeated; the caller gets StoreUnavailableError."""

    def script(peer: Peer, n: int) -> None:
        peer.read_request()
        peer.sock.sendall(_ok(b"1"))
        peer.read_request()
        peer.sock.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"partial')

    with scripted(script) as server, HttpClient(f"http://127.0.0.1:{server.port}", token="t") as c:
        assert c.request("GET", "/a") == 1
        with pytest.raises(StoreUnavailableError, match="lost the connection"):
            c.request("POST", "/b", {})
        assert server.connections == 1 and len(server.requests) == 2
        # the broken connection was not kept: the next call opens another
        assert c.request("GET", "/a") == 1
        assert server.connections == 2


def test_only_one_resend_when_the_new_connection_fails_too() -> None:
    """The re-send is on a new connection; if that one ends without an answer too,
    the caller gets StoreUnavailableError (the request went out twice, no more)."""

    def script(peer: Peer, n: int) -> None:
        peer.read_request()
        if n == 0:
            peer.sock.sendall(_ok(b"1"))
            peer.read_request()

    with scripted(script) as server, HttpClient(f"http://127.0.0.1:{server.port}", token="t") as c:
        assert c.request("GET", "/a") == 1
        with pytest.raises(StoreUnavailableError, match="lost the connection"):
            c.request("POST", "/b", {})
        assert server.connections == 2
        assert [r.split(b" ", 2)[1] for r in server.requests] == [b"/a", b"/b", b"/b"]


# --- keep-alive and threads -----------------------------------------------------------
def test_threads_share_the_client_each_on_its_own_kept_connection() -> None:
    """Eight threads call one client at once: every answer is the caller's own, and
    the connections are kept (at most one per thread, not one per call)."""

    def echo(req: bytes) -> bytes:
        return json.dumps(req.split(b" ", 2)[1].decode()).encode()

    errors: list[BaseException] = []
    with scripted(_answer_each(echo)) as server, HttpClient(f"http://127.0.0.1:{server.port}") as c:
        start = threading.Barrier(8)

        def run(t: int) -> None:
            try:
                start.wait()
                for i in range(25):
                    assert c.request("GET", f"/t{t}/{i}") == f"/t{t}/{i}"
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert errors == []
        assert len(server.requests) == 200
        assert 1 <= server.connections <= 8


def test_close_ends_the_idle_connections_and_a_later_call_opens_one() -> None:
    """close() closes the kept connection (the server sees it end); the client still
    works afterwards, on a new connection."""
    with scripted(_answer_each(lambda req: b"7")) as server:
        c = HttpClient(f"http://127.0.0.1:{server.port}", token="t")
        assert c.request("GET", "/a") == 7
        c.close()
        _wait_for(lambda: server.ended == 1)
        assert c.request("GET", "/a") == 7
        assert server.connections == 2
        c.close()


def test_requests_carry_the_token_json_and_the_url_prefix() -> None:
    """Each request names the host, asks for JSON, carries the bearer token, a JSON
    body with its type and length, and the URL's path prefix before the API path."""
    with (
        scripted(_answer_each(lambda req: b"{}")) as server,
        HttpClient(f"http://127.0.0.1:{server.port}/base/", token="tok") as c,
    ):
        c.request("POST", "/v1/x", {"a": "é"}, query={"n": 1, "skip": None})
        c.request("GET", "/v1/y")
        post, get = (r.decode() for r in server.requests)
        assert post.startswith("POST /base/v1/x?n=1 HTTP/1.1\r\n")
        lines = post.lower().split("\r\n")
        assert f"host: 127.0.0.1:{server.port}" in lines
        assert "authorization: bearer tok" in lines
        assert "accept: application/json" in lines
        assert "content-type: application/json" in lines
        body = '{"a":"\\u00e9"}'
        assert f"content-length: {len(body)}" in lines and post.endswith(body)
        assert get.startswith("GET /base/v1/y HTTP/1.1\r\n")
        assert "content-type" not in get.lower()


def test_bad_arguments_are_refused_before_anything_is_sent() -> None:
    """A body that is not JSON data, or a non-ASCII path, is InvalidInputError and no
    request reaches the server."""
    with (
        scripted(_answer_each(lambda req: b"{}")) as server,
        HttpClient(f"http://127.0.0.1:{server.port}") as c,
    ):
        with pytest.raises(InvalidInputError, match="JSON data"):
            c.request("POST", "/x", {"n": float("nan")})
        with pytest.raises(InvalidInputError, match="ASCII"):
            c.request("GET", "/nœud")
        assert server.requests == []
    with pytest.raises(InvalidInputError) as err:
        HttpClient("ftp://host")
    assert err.value.field == "url"


# --- timeouts -------------------------------------------------------------------------
def test_each_call_waits_its_own_timeout() -> None:
    """The client's timeout bounds a call; a call given a longer one (a waiting claim
    passes timeout + wait) gets its answer after the client's timeout has passed."""
    release = threading.Event()

    def script(peer: Peer, n: int) -> None:
        while (req := peer.read_request()) is not None:
            if b"/slow" in req.split(b"\r\n", 1)[0]:
                release.wait(30)
            peer.sock.sendall(_ok(b"1"))

    with (
        scripted(script) as server,
        HttpClient(f"http://127.0.0.1:{server.port}", token="t", timeout=0.2) as c,
    ):
        t0 = time.monotonic()
        with pytest.raises(StoreUnavailableError, match="timed out"):
            c.request("GET", "/slow")
        assert time.monotonic() - t0 < 5
        release.clear()
        timer = threading.Timer(0.5, release.set)
        timer.start()
        t0 = time.monotonic()
        assert c.request("GET", "/slow", timeout=30) == 1
        assert time.monotonic() - t0 >= 0.45  # answered after the client's 0.2 s
        timer.cancel()


def test_a_server_that_is_not_there_is_store_unavailable() -> None:
    """Connection refused: StoreUnavailableError naming the URL and the reason."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with (
        HttpClient(f"http://127.0.0.1:{port}", token="t") as c,
        pytest.raises(StoreUnavailableError, match=r"cannot reach .*refused.*corral serve"),
    ):
        c.request("GET", "/v1/settings")


# --- the error envelope ---------------------------------------------------------------
def test_error_answers_map_to_corral_errors() -> None:
    """An error envelope becomes the class of its code, with its message, field and
    HTTP status; an answer without one becomes the class of its status."""
    answers = {
        b"/nf": (404, {"error": {"code": "not_found", "message": "no task 9"}}),
        b"/lease": (409, {"error": {"code": "lease", "message": "stale", "field": "epoch"}}),
        b"/bad": (422, {"error": {"code": "invalid_input", "message": "m", "field": "role"}}),
        b"/proxy": (502, None),
        b"/teapot": (418, None),
    }

    def script(peer: Peer, n: int) -> None:
        while (req := peer.read_request()) is not None:
            status, env = answers[req.split(b" ", 2)[1]]
            body = json.dumps(env).encode() if env else b"<html>bad gateway</html>"
            peer.sock.sendall(
                b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body)
            )

    with scripted(script) as server, HttpClient(f"http://127.0.0.1:{server.port}", token="t") as c:
        cases: list[tuple[str, type[CorralError], str, str | None, int]] = [
            ("/nf", NotFoundError, "no task 9", None, 404),
            ("/lease", LeaseError, "stale", "epoch", 409),
            ("/bad", InvalidInputError, "m", "role", 422),
            ("/proxy", StoreUnavailableError, "bad gateway", None, 502),
            ("/teapot", CorralError, "bad gateway", None, 418),
        ]
        for path, cls, message, field, status in cases:
            with pytest.raises(CorralError) as err:
                c.request("GET", path)
            assert type(err.value) is cls, path
            assert message in str(err.value) and err.value.field == field
            assert err.value.status == status
        assert server.connections == 1  # error answers keep the connection


# --- TLS ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost (openssl)."""
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def test_https_verifies_the_server_and_keeps_the_connection(
    certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over https the server's certificate is checked against the trusted ones
    (here ``SSL_CERT_FILE``): trusted, calls work on one kept connection; not trusted,
    StoreUnavailableError and no request is read."""
    cert, key = certificate
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    with scripted(_answer_each(lambda req: b"[1]"), tls=ctx) as server:
        url = f"https://127.0.0.1:{server.port}"
        with pytest.raises(StoreUnavailableError, match=r"cannot reach .*CERTIFICATE"):
            HttpClient(url, token="t").request("GET", "/a")
        assert server.requests == []
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        with HttpClient(url, token="t") as c:
            assert c.request("GET", "/a") == [1]
            assert c.request("POST", "/b", {"x": 1}) == [1]
        assert len(server.requests) == 2
        assert server.connections == 2  # the refused handshake, then one kept


# --- a real server --------------------------------------------------------------------
def _connections_to(url: str) -> int:
    """This process's open TCP connections to the server at ``url`` (psutil)."""
    import psutil

    port = int(url.rsplit(":", 1)[1])
    proc = psutil.Process()
    conns = proc.net_connections("tcp") if hasattr(proc, "net_connections") else []
    return sum(1 for c in conns if c.raddr and c.raddr.port == port)


def test_a_worker_step_over_a_real_server_keeps_one_connection(tmp_path: Path) -> None:
    """Against corral serve's app on uvicorn: register, add, claim, complete and a
    stale-epoch refusal (LeaseError) all on the client's pooled connection."""
    with serving(tmp_path) as (url, _embedded), HttpClient(url, token=TOKEN) as c:
        c.register_node("w1", "developer")
        c.add_task("t", role="developer")
        node = c.for_node("w1")
        try:
            task = node.claim_best_task("w1", "developer")
            assert task is not None and task.status == "in_progress"
            with pytest.raises(LeaseError):
                node.complete_task(task.id, "w1", task.epoch + 1)
            done = node.complete_task(task.id, "w1", task.epoch, result={"ok": True})
            assert done.status == "done"
            assert _connections_to(url) == 2  # one for each client, kept
        finally:
            node.close()
