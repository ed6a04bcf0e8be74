"""Runs examples/python/celery_tasks.py's tasks in this process with Celery's `apply` (no
broker, no worker) against the Redis at REDIS_URL and prints what the shared limits saw;
scripts/test-examples checks the lines."""

import celery_tasks

celery_tasks.charge.apply(args=("cus_1",)).get()
celery_tasks.sync_invoice.apply(args=("inv_7",)).get()
print("stripe remaining:", celery_tasks.stripe.peek().remaining)
print("erp remaining:", celery_tasks.erp.peek().remaining)
