"""A reverse proxy in front of a server, for the tests: it passes requests and answers on, and
answers with a page of its own where told to (its routes changed, the server behind it
restarting)."""

from __future__ import annotations

import threading

import httpx


class ReverseProxy:
    """A reverse proxy in front of a server that answers its own page of ``status`` (502: as
    while the server behind it restarts) to every request to ``down_on`` (a path prefix) while
    ``down`` is set, and holds each such request ``delay`` seconds before it passes it on (a
    slow or hung server); ``answered`` holds each request's path and whether the server
    answered it."""

    def __init__(self, upstream: str, down_on: str = "/report", status: int = 502) -> None:
        import http.server

        self.down = threading.Event()
        self.delay = 0.0
        self._closing = threading.Event()
        self.answered: list[tuple[str, bool]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                held = outer.delay and self.path.startswith(down_on)
                if held and outer._closing.wait(outer.delay):
                    return  # closed while held: no answer
                cut = outer.down.is_set() and self.path.startswith(down_on)
                outer.answered.append((self.path, not cut))
                passed: dict[str, str] = {}  # the server's own headers, as a proxy passes them
                if cut:
                    content, kind = f"<html>{status} from the proxy</html>".encode(), "text/html"
                    code = status
                else:
                    headers = {"Content-Type": self.headers.get("Content-Type", "")}
                    answer = httpx.request(
                        self.command, upstream + self.path, content=body, headers=headers
                    )
                    code, content = answer.status_code, answer.content
                    kind = answer.headers.get("content-type", "application/json")
                    own = {"content-type", "content-length", "date", "server", "connection"}
                    passed = {k: v for k, v in answer.headers.items() if k not in own}
                self.send_response(code)
                for name, value in passed.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _forward  # noqa: N815

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._closing.set()
        self.server.shutdown()
        self.server.server_close()
