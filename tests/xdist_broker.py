"""Loaded before Django's settings (pytest.ini: `-p tests.xdist_broker`): under pytest-xdist, each worker
process gets a Redis database of its own for its Celery broker, as it gets a test database of its own
(pytest-django's `_gw0` suffix). One broker for all would let a worker's Celery process take the other's
tasks and write them to the wrong test database. gw0 keeps the broker it was given, gw1 the database
below it, and so on."""

import os

worker = os.environ.get("PYTEST_XDIST_WORKER", "")
broker = os.environ.get("CELERY_BROKER_URL", "")
if worker.startswith("gw") and broker.startswith("redis://"):
    base, _, number = broker.rpartition("/")
    os.environ["CELERY_BROKER_URL"] = f"{base}/{int(number or 0) - int(worker[2:])}"
