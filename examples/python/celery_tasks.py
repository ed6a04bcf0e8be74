# Celery: one limit shared by every worker process.
import os

from celery import Celery, Task

import ratekeeper

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
app = Celery("billing", broker=REDIS_URL)

backend = ratekeeper.Backend.redis(REDIS_URL, failure_policy="fallback", fallback_divisor=8)
stripe = backend.token_bucket("stripe", rate=25, capacity=25)
erp = backend.concurrent("erp", 10, lock_timeout=60, wait_timeout=30)


@app.task(bind=True, max_retries=None)
def charge(self: Task, customer_id: str) -> None:
    d = stripe.check()
    if not d.allowed:
        raise self.retry(countdown=d.retry_after)
    print("charged", customer_id)


@app.task
@erp.within_limit()  # at most 10 at once across the fleet; OverLimit after 30 s
def sync_invoice(invoice_id: str) -> None:
    print("synced", invoice_id)
