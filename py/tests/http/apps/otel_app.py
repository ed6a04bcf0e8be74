"""The OpenTelemetry test app: ``RateLimitMiddleware`` inside a server span (as
opentelemetry-instrumentation-asgi makes one), spans kept by the SDK's in-memory exporter and
served as JSON at ``/spans`` (outside the limit)."""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.applications import Starlette
from starlette.requests import HTTPConnection, Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from common import configure, path_of
from ratekeeper.asgi import RateLimitMiddleware

raw, kwargs = configure()
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
tracer = provider.get_tracer("otel_app")


async def hello(request: Request) -> Response:
    return PlainTextResponse("hello")


async def spans(request: Request) -> Response:
    out = [{"name": s.name, "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in s.events]}
           for s in exporter.get_finished_spans()]
    return Response(json.dumps(out), media_type="application/json")


def skip(conn: HTTPConnection) -> bool:
    return path_of(conn) == "/spans"


inner = Starlette(routes=[Route("/", hello), Route("/spans", spans)])
inner.add_middleware(RateLimitMiddleware, skip=skip, **kwargs)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Each HTTP request in its own current span, like the ASGI instrumentation's server span."""
    if scope["type"] != "http":
        await inner(scope, receive, send)
        return
    with tracer.start_as_current_span(f"GET {scope['path']}"):
        await inner(scope, receive, send)
