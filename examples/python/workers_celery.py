# Celery: over the limit, the task is rescheduled (Sidekiq's backoff), not failed.
import os

from celery import Celery, Task

import ratekeeper
from ratekeeper.celery import limited

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
app = Celery("billing", broker=REDIS_URL)
backend = ratekeeper.Backend.redis(REDIS_URL)
stripe = backend.bucket("stripe-api", 20, 10)  # the API allows 20 calls per 10 s
backoff = ratekeeper.Backoff(base=60, jitter=30, max_reschedules=20)  # default: 300·n + rand(300) s


@app.task(bind=True, max_retries=3)  # bind=True: the wrapper reschedules through the task
@limited(stripe, key=lambda customer_id: None, backoff=backoff)  # key: a function of the task's args
def charge(self: Task, customer_id: str) -> None:
    # Runs only when admitted; refused runs are sent again in max(retry_after, 60·n) + rand(30) s,
    # counted in a message header, so max_retries counts only the task's own failures.
    print("charged", customer_id)
