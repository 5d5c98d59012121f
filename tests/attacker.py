"""A process holding only a runner's credential, as a red team would use it: `python -m tests.attacker ATTACK` with
RUNNER_BROKER_URL (that runner's broker user) and ATTACK_ARGS (JSON) in an otherwise empty environment. It imports
nothing of the dashboard, and prints what the broker answered as one JSON line: {"done": bool, "error": str}.

Attacks: task (send a Celery task by name to a queue), control (a remote-control broadcast), read (Redis commands on
keys), publish (a message of its own choosing to a queue).
"""

from __future__ import annotations

import json
import os
import sys


def _celery():
    from celery import Celery

    app = Celery("attacker", broker=os.environ["RUNNER_BROKER_URL"], set_as_current=False)
    app.conf.update(broker_connection_retry_on_startup=False, broker_connection_max_retries=0)
    return app


def task(name: str, queue: str, args: list | None = None, kwargs: dict | None = None) -> None:
    _celery().send_task(name, args=args or [], kwargs=kwargs or {}, queue=queue)


def control(command: str, arguments: dict | None = None) -> None:
    _celery().control.broadcast(command, arguments=arguments or {}, reply=False)


def read(commands: list[list]) -> list:
    import redis

    with redis.Redis.from_url(os.environ["RUNNER_BROKER_URL"]) as client:
        return [repr(client.execute_command(*command))[:200] for command in commands]


def publish(queue: str, body: object = None, content_type: str = "application/json", size: int = 0) -> None:
    """Publish `body` (or `size` bytes of text) to `queue`."""
    from kombu import Connection

    body = "x" * size if size else body
    with Connection(os.environ["RUNNER_BROKER_URL"], connect_timeout=5) as connection:
        producer = connection.Producer()
        if content_type == "application/json":
            producer.publish(body, exchange="", routing_key=queue, serializer="json", retry=False)
        else:
            producer.publish(body, exchange="", routing_key=queue, content_type=content_type, content_encoding="utf-8")


ATTACKS = {"task": task, "control": control, "read": read, "publish": publish}


def main() -> None:
    attack = ATTACKS[sys.argv[1]]
    try:
        answer = attack(**json.loads(os.environ.get("ATTACK_ARGS", "{}")))
        print(json.dumps({"done": True, "error": "", "answer": answer}))
    except Exception as exc:  # noqa: BLE001 - the broker's refusal is the result
        print(json.dumps({"done": False, "error": f"{type(exc).__name__}: {exc}"}))


if __name__ == "__main__":
    main()
