"""One keep-alive HTTP/1.1 connection for ``corral.remote.HttpClient``: a socket
with ``TCP_NODELAY`` that writes each request in one ``send`` and reads just what the
server sends (``Content-Length`` or chunked bodies)."""

from __future__ import annotations

import re
import socket

__all__ = ["Closed", "Connection"]

_MAX_HEAD = 64 * 1024
# The response header fields that frame the body or end the connection: (name, value).
_FRAMING = re.compile(
    r"(?:\A|\r\n)[ \t]*(content-length|transfer-encoding|connection)[ \t]*:([^\r]*)"
)


class Closed(Exception):
    """The connection ended before a whole response arrived."""

    def __init__(self, message: str, *, partial: bool) -> None:
        super().__init__(message)
        self.partial = partial  # some of the response had arrived


class Connection:
    """One keep-alive HTTP/1.1 connection (plain or TLS), ``TCP_NODELAY`` set."""

    def __init__(self, host: str, port: int, timeout: float, *, tls: bool = False) -> None:
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls:
            import ssl

            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        self.sock = sock
        self.buf = bytearray()
        self.timeout = timeout

    def close(self) -> None:
        self.sock.close()

    def _fill(self, got: bool) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise Closed("the server closed the connection", partial=got or bool(self.buf))
        self.buf += chunk

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill(True)
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def _line(self) -> bytes:
        while (i := self.buf.find(b"\r\n")) < 0:
            self._fill(True)
        out = bytes(self.buf[:i])
        del self.buf[: i + 2]
        return out

    def roundtrip(self, message: bytes, timeout: float) -> tuple[int, bytes, bool]:
        """Send one request; return (status, body, whether the server will close)."""
        if timeout != self.timeout:
            self.sock.settimeout(timeout)
            self.timeout = timeout
        try:
            self.sock.sendall(message)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise Closed(str(exc), partial=False) from None
        try:
            while True:
                while (end := self.buf.find(b"\r\n\r\n")) < 0:
                    if len(self.buf) > _MAX_HEAD:
                        raise Closed("response headers too large", partial=True)
                    self._fill(False)
                head = self.buf[:end].decode("latin-1")
                del self.buf[: end + 4]
                line, _, fields = head.partition("\r\n")
                parts = line.split(" ", 2)
                if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
                    raise Closed(f"not an HTTP response: {line[:80]!r}", partial=True)
                status = int(parts[1])
                if status >= 200:
                    break  # 1xx: an interim response, the real one follows
            length: int | None = None
            chunked = False
            close = parts[0] == "HTTP/1.0"
            # Only these three fields matter here; names are case-insensitive.
            for name, value in _FRAMING.findall(fields.lower()):
                if name == "content-length":
                    length = int(value.strip())
                elif name == "transfer-encoding":
                    chunked = "chunked" in value
                else:
                    value = value.strip()
                    close = "close" in value or (close and "keep-alive" not in value)
            if chunked:
                body = bytearray()
                while True:
                    size = int(self._line().split(b";", 1)[0], 16)
                    if size == 0:
                        while self._line():
                            pass  # trailers
                        break
                    body += self._take(size)
                    self._take(2)
                return status, bytes(body), close
            if length is not None:
                return status, self._take(length), close
            body = bytearray(self.buf)  # no length: the body runs to the end
            self.buf.clear()
            while chunk := self.sock.recv(65536):
                body += chunk
            return status, bytes(body), True
        except ConnectionResetError as exc:
            raise Closed(str(exc), partial=bool(self.buf)) from None
        except ValueError as exc:
            raise Closed(f"malformed response: {exc}", partial=True) from None
