# FastAPI: every route (and WebSocket) limited to 100 requests a minute per client address, and
# a login route that counts only failed attempts: 5 a minute.
import os

from fastapi import Depends, FastAPI, HTTPException, WebSocket

from ratekeeper import Backend
from ratekeeper.asgi import RateLimitMiddleware
from ratekeeper.fastapi import RateLimited, limit, rate_limited_handler

backend = Backend.redis(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))

app = FastAPI()
app.add_middleware(RateLimitMiddleware, limiter=backend.window("api", 100, "minute"))
# Refusals of the per-route dependency answer the RFC 9457 problem (else FastAPI's {"detail"}).
app.add_exception_handler(RateLimited, rate_limited_handler)

failed_logins = backend.window("login-failures", 5, "minute")


@app.post("/login", dependencies=[Depends(limit(failed_logins, count="failures"))])
async def login(password: str) -> dict[str, str]:
    if password != "open sesame":
        raise HTTPException(status_code=401, detail="wrong password")
    return {"welcome": "back"}


@app.get("/")
async def hello() -> dict[str, str]:
    return {"hello": "world"}


@app.websocket("/echo")
async def echo(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_text(await websocket.receive_text())
    await websocket.close()
