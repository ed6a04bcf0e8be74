import os

import ratekeeper

url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
backend = ratekeeper.Backend.redis(url)
api = backend.limiter("api", {"kind": "window", "limit": 100, "interval": 60})

# During an incident: 200 per minute for every process in every language, within 200 ms.
backend.set_limit("api", {"kind": "window", "limit": 200, "interval": 60})
backend.set_limit("api", {"kind": "window", "limit": 1000, "interval": 60}, key="tenant-7")
print("api:", api.check().limit, "tenant-7:", api.check("tenant-7").limit)

for info in backend.limiters():  # the registry: every limiter any process used
    print(info.name, info.kind, info.spec, "overrides:", len(info.overrides))

backend.clear_limit("api")  # back to the spec in the code
backend.clear_limit("api", key="tenant-7")
print("refused so far:", api.metrics().refused)
print(backend.prometheus().splitlines()[2])  # the text exposition format
