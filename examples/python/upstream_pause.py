"""Pausing on an upstream 429: every process stops calling the partner until it said to."""

import os

import httpx  # requests works the same: observe_response reads .status_code and .headers

import ratekeeper

backend = ratekeeper.Backend.redis(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))
partner = backend.token_bucket("partner-api", rate=50, capacity=50)


def fetch(client: httpx.Client, url: str) -> httpx.Response | None:
    d = partner.check()  # refused while paused: retry_after is what is left of the pause
    if not d.allowed:
        print(f"not calling: retry in {d.retry_after:.0f}s")
        return None
    response = client.get(url)
    paused = partner.observe_response(response)  # 429/503 + Retry-After: pause every process
    if paused is not None:
        print(f"{response.status_code}: every process pauses {paused:.0f}s")
    return response


if __name__ == "__main__":
    with httpx.Client() as client:
        fetch(client, os.environ["UPSTREAM_URL"])  # the partner answers 429, Retry-After: 30
        fetch(client, os.environ["UPSTREAM_URL"])  # not sent
