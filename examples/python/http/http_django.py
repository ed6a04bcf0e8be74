# Django (one file; serve with `gunicorn http_django` or `uvicorn http_django:asgi`): every request
# limited to 100 a minute per client address by the middleware, a login view that counts only
# failed attempts (5 a minute, an async view), and an exempt health check.
import os

from django.conf import settings
from django.core.asgi import get_asgi_application
from django.core.wsgi import get_wsgi_application
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path

from ratekeeper import Backend
from ratekeeper.django import exempt, ratelimit

backend = Backend.redis(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))

settings.configure(
    ROOT_URLCONF=__name__,
    ALLOWED_HOSTS=["*"],
    MIDDLEWARE=["ratekeeper.django.RateLimitMiddleware"],
    RATEKEEPER_MIDDLEWARE={"limiter": backend.window("api", 100, "minute")},
)


def hello(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"hello": "world"})


@ratelimit(backend.window("login-failures", 5, "minute"), count="failures")
async def login(request: HttpRequest) -> HttpResponse:
    if request.GET.get("password") != "open sesame":
        return JsonResponse({"error": "wrong password"}, status=401)
    return JsonResponse({"welcome": "back"})


@exempt
def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


urlpatterns = [path("", hello), path("login", login), path("health", health)]
application = get_wsgi_application()
asgi = get_asgi_application()
