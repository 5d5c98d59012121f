"""The runners' broker: where each registered runner's traffic lives, and the broker user that confines it there.

The privileged processes (web, coordinator, GitHub writer) use CELERY_BROKER_URL; runners never get it. Every runner
talks through RUNNER_BROKER_URL, and only to its own two queues:
- `runner.<name>.jobs`: the jobs the coordinator gives it (runs/assignment.py), a Celery task each;
- `runner.<name>.reports`: what it reports and its heartbeats, signed (runs/jobs.py), which the coordinator's
  gateway reads (runs/gateway.py) and forwards to the coordinator's tasks only when they are authentic.
On Redis a runner's broker user (acl_rule) may touch the keys of its own queues and nothing else: no other runner's
queue, no privileged queue, no pub/sub channel (so no Celery remote control, in either direction), and only the
commands a Celery worker consuming one queue needs. The broker refuses the rest, whatever the runner sends. With
RUNNER_BROKER_ACL=manage the coordinator keeps those users itself (provision, remove); otherwise the operator adds
the line the runners page shows. The embedded default (kombu's filesystem transport) has no users to confine
anyone: it is one machine's development setup, and the reports are still authenticated by their signatures.
"""

from __future__ import annotations

import hashlib
import logging

from django.conf import settings

log = logging.getLogger(__name__)

PREFIX = "runner"
# The commands a Celery worker needs to consume its queue (BRPOP, the acks_late bookkeeping of kombu's QoS, the lock
# that guards its restore, the queue's binding) and to publish its reports: nothing that reads another key's name
# (KEYS, SCAN), administers the server (CONFIG, CLIENT LIST/KILL, ACL, DEBUG) or touches a channel.
RUNNER_COMMANDS = (
    "auth hello ping select quit reset client|setname client|id "
    "brpop rpop lpush rpush llen exists del set get pexpire "
    "hset hget hdel zadd zrem zrange sadd srem smembers "
    "multi exec discard watch unwatch evalsha eval script|load"
).split()
# The coordinator's own bookkeeping keys on the runners' broker (its unacknowledged reports): named so that no
# runner's pattern (runner.<name>.*) matches them.
GATEWAY_TRANSPORT_OPTIONS = {
    "unacked_key": "runner-gateway.unacked",
    "unacked_index_key": "runner-gateway.unacked_index",
    "unacked_mutex_key": "runner-gateway.unacked_mutex",
}


def jobs_queue(name: str) -> str:
    return f"{PREFIX}.{name}.jobs"


def reports_queue(name: str) -> str:
    return f"{PREFIX}.{name}.reports"


def broker_user(name: str) -> str:
    return f"{PREFIX}-{name}"


def key_patterns(name: str) -> list[str]:
    """The keys runner `name` may touch: its queues (with kombu's priority suffixes), kombu's bookkeeping of them
    (the unacked messages under transport_options' names), and the binding Celery declares for its queue."""
    queue = jobs_queue(name)
    return [f"{PREFIX}.{name}.*", f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}"]


def acl_rule(name: str, secret: str) -> list[str]:
    """The Redis ACL rule of runner `name`'s broker user, as ACL SETUSER's arguments after the user name. The password
    is given by its SHA-256 (#...): the broker never holds the secret itself."""
    password = hashlib.sha256(secret.encode()).hexdigest()
    return [
        "reset",
        "on",
        f"#{password}",
        "resetkeys",
        *(f"~{pattern}" for pattern in key_patterns(name)),
        "resetchannels",
        "-@all",
        *(f"+{command}" for command in RUNNER_COMMANDS),
    ]


def acl_line(name: str, secret: str) -> str:
    """The rule as a line of a Redis ACL file (deploy/redis-runners.acl)."""
    return " ".join(["user", broker_user(name), *acl_rule(name, secret)])


def transport_options(name: str) -> dict:
    """A runner's broker transport options: kombu's bookkeeping keys under its own prefix, so that its user's pattern
    covers them and no other runner shares them."""
    options = dict(settings.RUNNER_BROKER_TRANSPORT_OPTIONS)
    if not settings.RUNNER_BROKER_URL.startswith("filesystem://"):
        options.update(
            unacked_key=f"{PREFIX}.{name}.unacked",
            unacked_index_key=f"{PREFIX}.{name}.unacked_index",
            unacked_mutex_key=f"{PREFIX}.{name}.unacked_mutex",
        )
    return options


def coordinator_transport_options() -> dict:
    options = dict(settings.RUNNER_BROKER_TRANSPORT_OPTIONS)
    if not settings.RUNNER_BROKER_URL.startswith("filesystem://"):
        options.update(GATEWAY_TRANSPORT_OPTIONS)
    return options


# --- the broker's users, kept by the coordinator (RUNNER_BROKER_ACL=manage) ------------------------------------------


def manages_users() -> bool:
    return settings.RUNNER_BROKER_ACL == "manage" and settings.RUNNER_BROKER_URL.startswith(("redis://", "rediss://"))


def _admin():
    import redis

    return redis.Redis.from_url(settings.RUNNER_BROKER_URL)


def provision(name: str, secret: str) -> bool:
    """Create (or reset) runner `name`'s broker user; returns whether the broker was changed (False when the
    operator keeps the users)."""
    if not manages_users():
        return False
    with _admin() as client:
        client.execute_command("ACL", "SETUSER", broker_user(name), *acl_rule(name, secret))
    return True


def remove(name: str) -> bool:
    """Delete runner `name`'s broker user: Redis closes every connection it holds, so a revoked runner is off the
    broker at once."""
    if not manages_users():
        return False
    with _admin() as client:
        client.execute_command("ACL", "DELUSER", broker_user(name))
    return True


def users() -> set[str]:
    """The runner users the broker has now (to put back those a broker restart lost)."""
    if not manages_users():
        return set()
    with _admin() as client:
        return {
            name.decode() if isinstance(name, bytes) else name
            for name in client.execute_command("ACL", "USERS")
            if (name.decode() if isinstance(name, bytes) else name).startswith(f"{PREFIX}-")
        }
