"""Loaded before Django's settings (pytest.ini: `-p tests.xdist_broker`): under pytest-xdist, each worker
process gets a Redis database of its own for its Celery broker, as it gets a test database of its own
(pytest-django's `_gw0` suffix). One broker for all would let a worker's Celery process take the other's
tasks and write them to the wrong test database. gw0 keeps the broker's database, gw1 the one below it
(15, 14, ...; wrapping round Redis's 16)."""

import os
from urllib.parse import urlsplit, urlunsplit


def broker_for(url: str, worker: str) -> str:
    """The broker URL of xdist worker `worker` ("gw1"), given the suite's; other brokers are left alone."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss") or not worker.startswith("gw"):
        return url
    database = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{(database - int(worker[2:])) % 16}"))


if "CELERY_BROKER_URL" in os.environ:
    os.environ["CELERY_BROKER_URL"] = broker_for(
        os.environ["CELERY_BROKER_URL"], os.environ.get("PYTEST_XDIST_WORKER", "")
    )
