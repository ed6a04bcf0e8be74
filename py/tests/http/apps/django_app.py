"""The Django test app (one file, WSGI ``application`` and ASGI ``asgi``): the middleware with
the options of ``RK_OPTIONS``, a sync and an async view of each outcome."""

from __future__ import annotations

from django.conf import settings
from django.core.asgi import get_asgi_application
from django.core.wsgi import get_wsgi_application
from django.http import HttpRequest, HttpResponse
from django.urls import path

from common import configure

raw, kwargs = configure()
settings.configure(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"], MIDDLEWARE=["ratekeeper.django.RateLimitMiddleware"],
                   RATEKEEPER_MIDDLEWARE=kwargs)


def hello(request: HttpRequest) -> HttpResponse:
    return HttpResponse("hello")


async def ahello(request: HttpRequest) -> HttpResponse:
    return HttpResponse("hello")


def fail(request: HttpRequest) -> HttpResponse:
    return HttpResponse("wrong password", status=401)


async def afail(request: HttpRequest) -> HttpResponse:
    return HttpResponse("wrong password", status=401)


urlpatterns = [path("", hello), path("async", ahello), path("fail", fail), path("afail", afail)]
application = get_wsgi_application()
asgi = get_asgi_application()
