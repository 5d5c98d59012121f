"""Registering bisection runners: an operator names a runner and its device, the dashboard gives it a secret (shown
once), and can take it back. Each step is audited (RunnerEvent) and, with RUNNER_BROKER_ACL=manage, mirrored on the
broker: the runner's broker user is created with the secret as its password and deleted when the runner is revoked
(runs/broker.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from rubric_app.models import RUNNER_NAME_PATTERN, Runner, RunnerEvent, WorkerHeartbeat
from rubric_app.runs import broker, coordinator

log = logging.getLogger(__name__)


class Refused(ValueError):
    """A registration that cannot be made, and why."""


@dataclass(frozen=True)
class Issued:
    """What an operator is shown once: the runner, its secret, and how to start it with them."""

    runner: Runner
    secret: str

    @property
    def managed(self) -> bool:
        """Whether the coordinator makes its broker user (else the operator adds acl_line)."""
        return broker.manages_users()

    @property
    def acl_line(self) -> str:
        return broker.acl_line(self.runner.name, self.secret)

    @property
    def broker_user(self) -> str:
        return broker.broker_user(self.runner.name)


def register(*, name: str, device: str, by: str) -> Issued:
    """Register a new runner; Refused if the name is taken or not a runner's name, or the device unknown."""
    name = name.strip().lower()
    if not RUNNER_NAME_PATTERN.match(name):
        raise Refused(
            "a runner's name is 1 to 40 lowercase letters, digits and dashes, starting with a letter or digit"
        )
    if device not in Runner.Device.values:
        raise Refused(f"the device is cpu or cuda, not {device!r}")
    with transaction.atomic():
        if Runner.objects.filter(name=name).exists():
            raise Refused(f"a runner named {name} is registered already (revoked runners keep their name)")
        runner = Runner(name=name, device=device, registered_by=by)
        runner.new_salt()
        runner.save()
        RunnerEvent.objects.create(runner=runner, action=RunnerEvent.Action.REGISTERED, by=by, note=f"device {device}")
    return _issued(runner)


def rotate(runner: Runner, *, by: str) -> Issued:
    """A new secret for `runner`: the old one stops counting at once."""
    if not runner.is_active:
        raise Refused(f"runner {runner.name} is revoked")
    with transaction.atomic():
        runner.new_salt()
        runner.save(update_fields=["salt"])
        RunnerEvent.objects.create(runner=runner, action=RunnerEvent.Action.ROTATED, by=by)
    return _issued(runner)


def revoke(runner: Runner, *, by: str, note: str = "") -> None:
    """Revoke `runner`: its reports and heartbeats count no more, the runs it holds end (or go back to the queue when
    not started), and its broker user goes."""
    with transaction.atomic():
        revoked = Runner.objects.filter(pk=runner.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now(), revoked_by=by
        )
        if not revoked:
            return
        RunnerEvent.objects.create(runner=runner, action=RunnerEvent.Action.REVOKED, by=by, note=note[:300])
        WorkerHeartbeat.objects.filter(runner=runner).delete()
        coordinator.end_runs_of_revoked(runner)
    if broker.remove(runner.name):
        log.info("runner %s revoked: its broker user deleted", runner.name)


def _issued(runner: Runner) -> Issued:
    return Issued(runner, runner.secret())


def provision(runner: Runner) -> bool:
    """Make (or reset to its current secret) `runner`'s broker user, when the coordinator keeps them; returns whether
    it did. The coordinator's task does it for the runners page (its process may administer the broker; the web's
    need not), manage.py register_runner in its own process."""
    runner.refresh_from_db(fields=["salt", "revoked_at"])
    return runner.is_active and broker.provision(runner.name, runner.secret())


def provision_missing() -> int:
    """Give every active runner whose broker user is missing its user again (a broker restarted without its ACL);
    returns how many. Nothing unless the coordinator manages the broker's users."""
    if not broker.manages_users():
        return 0
    present = broker.users()
    missing = [runner for runner in Runner.objects.active() if broker.broker_user(runner.name) not in present]
    for runner in missing:
        broker.provision(runner.name, runner.secret())
    return len(missing)
