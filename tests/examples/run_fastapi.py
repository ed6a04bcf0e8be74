"""Serves examples/python/fastapi_app.py with FastAPI's TestClient (in-process, no socket)
against the Redis at REDIS_URL: 100 requests pass with the headers, the 101st gets 429 with
Retry-After; scripts/test-examples checks the printed lines."""

import warnings

# Starlette 1.x warns that its TestClient will move to httpx2; the example does not care.
warnings.filterwarnings("ignore", message=".*httpx.*")

from fastapi.testclient import TestClient  # noqa: E402

from fastapi_app import app  # noqa: E402

with TestClient(app) as client:
    statuses = [client.get("/").status_code for _ in range(100)]
    print("first 100:", sorted(set(statuses)))
    refused = client.get("/")
    print("101st:", refused.status_code, refused.json(), "retry-after" in refused.headers)
