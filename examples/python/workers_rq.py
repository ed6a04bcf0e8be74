# RQ: over the limit, the job is enqueued again later (run workers with --with-scheduler).
import os

from redis import Redis
from rq import Queue, Retry

import ratekeeper
from ratekeeper.rq import limited

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
backend = ratekeeper.Backend.redis(REDIS_URL)
erp = backend.concurrent("erp", 10)  # concurrent limiters are held for the whole job
queue = Queue("invoices", connection=Redis.from_url(REDIS_URL))


@limited(erp, key=lambda invoice_id: None, backoff=ratekeeper.Backoff(max_reschedules=5))
def sync_invoice(invoice_id: str) -> None:
    print("synced", invoice_id)


def sync_later(invoice_id: str) -> None:
    queue.enqueue(sync_invoice, invoice_id, retry=Retry(max=3))  # Retry: the job's own failures only
