"""Runs the README's worker examples against the Redis at REDIS_URL: the Celery task with
Celery's `apply` (no broker, no worker), the RQ job through a real in-process RQ worker in burst
mode (`sync_later` enqueues, then the worker runs it); scripts/test-examples
checks the printed lines."""

import workers_celery
import workers_rq
from rq import SimpleWorker

workers_celery.charge.apply(args=("cus_1",)).get()
print("stripe remaining:", workers_celery.stripe.peek().remaining)

workers_rq.sync_later("inv_7")
SimpleWorker([workers_rq.queue], connection=workers_rq.queue.connection).work(burst=True)
print("erp remaining:", workers_rq.erp.peek().remaining)
