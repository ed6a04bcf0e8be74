"""A Python HTTP app sharing a limit with the Node middleware (node/__test__/http-cross-language.test.js).

Until ratekeeper's Python HTTP middleware is in main, this is a plain `http.server` app that
checks the same limiter the Node example apps use (`window('api', 100, 'minute')` on the same
Redis), keyed like them by the client address, answering 200 or 429. Prints `listening on PORT`.
"""

import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import ratekeeper

backend = ratekeeper.Backend.redis(os.environ["REDIS_URL"], deadline=1.0)
limiter = backend.window("api", 100, "minute")


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        decision = limiter.check(self.client_address[0])
        body = b"hello" if decision.allowed else b"too many requests"
        self.send_response(200 if decision.allowed else 429)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


server = ThreadingHTTPServer(("127.0.0.1", int(os.environ.get("PORT", "0"))), Handler)
print(f"listening on {server.server_address[1]}", flush=True)
server.serve_forever()
