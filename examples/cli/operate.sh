#!/usr/bin/env bash
# The fleet's limits from a shell: RATEKEEPER_REDIS_URL names the Redis every process shares.
set -euo pipefail
export RATEKEEPER_REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"

# One nightly report at a time across every host; a second copy waits up to 30 s, then exits
# 75 (EX_TEMPFAIL) without running it.
ratekeeper run nightly-report --wait 30 -- echo "report built"

# 100 syncs per minute per tenant; tenant-7 pays for 1000.
ratekeeper run sync --spec '{"kind":"window","limit":100,"interval":60}' --key tenant-7 -- echo "synced"
ratekeeper set sync '{"kind":"window","limit":1000,"interval":60}' --key tenant-7
ratekeeper inspect sync --key tenant-7
ratekeeper reset sync --key tenant-7   # forget its count
ratekeeper unset sync --key tenant-7   # back to 100
ratekeeper limits
