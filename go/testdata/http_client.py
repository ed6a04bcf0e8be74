"""A client process of go/middleware_test.go: sends N requests to URL and prints one JSON line
per response, its rate-limit fields parsed by http-sfv (a parser none of us wrote)."""
import base64
import json
import sys
import urllib.error
import urllib.request

import http_sfv


def sf_list(value):
    parsed = http_sfv.List()
    parsed.parse(value.encode())
    out = []
    for member in parsed:
        params = {k: (base64.b64encode(v).decode() if isinstance(v, bytes) else v) for k, v in member.params.items()}
        out.append([str(member.value), params])
    return out


def main():
    url, n = sys.argv[1], int(sys.argv[2])
    for _ in range(n):
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                status, headers, body = resp.status, resp.headers, resp.read()
        except urllib.error.HTTPError as e:
            status, headers, body = e.code, e.headers, e.read()
        out = {"status": status, "content_type": headers.get("Content-Type"), "retry_after": headers.get("Retry-After")}
        for field in ("RateLimit", "RateLimit-Policy"):
            if headers.get(field) is not None:
                out[field] = sf_list(headers[field])
        if status != 200:
            out["body"] = json.loads(body)
        print(json.dumps(out), flush=True)


main()
