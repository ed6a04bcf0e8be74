"""Runs a README "Pausing on an upstream 429" example (the command in argv) against a real
local HTTP server that answers every request 429 with Retry-After: 30, at UPSTREAM_URL, then
prints how many requests the server saw; scripts/test-examples checks the printed lines."""

import http.server
import os
import subprocess
import sys
import threading

seen: list[str] = []


class Partner(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        seen.append(self.path)
        self.send_response(429)
        self.send_header("Retry-After", "30")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Partner)
threading.Thread(target=server.serve_forever, daemon=True).start()
env = {**os.environ, "UPSTREAM_URL": f"http://127.0.0.1:{server.server_address[1]}/charges"}
done = subprocess.run(sys.argv[1:], env=env)
server.shutdown()
print("the partner saw", len(seen), "request")
sys.exit(done.returncode)
