"""Checks on one exact window of 10 per hour in the Redis at $REDIS_URL, shared by every process
that runs this (scripts/test-packages runs it from the x86_64 wheel and from the aarch64 wheel
under qemu, on the same key): prints `ARCH admitted N of M`.

Usage: shared_window.py KEY ATTEMPTS"""

import os
import platform
import sys

import ratekeeper

key, attempts = sys.argv[1], int(sys.argv[2])
backend = ratekeeper.Backend.redis(os.environ["REDIS_URL"], prefix="packages-platforms")
# An exact sliding window: never more than 10 in any hour, wherever the processes run.
limiter = backend.window("shared", 10, 3600)
admitted = sum(limiter.check(key).allowed for _ in range(attempts))
print(f"{platform.machine()} admitted {admitted} of {attempts}")
