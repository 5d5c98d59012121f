"""The contract between the coordinator and a bisection runner: a self-contained job out, reports back (pure Python).

A runner holds no database and no secret (docs/bisection.md#runners): everything it needs to run a repro is in the
job, and everything the dashboard learns of the run comes back in reports, which the coordinator checks against the
run's row before it records anything. A report names its run, the job's token (a secret of that job: a report
without it is forged), the message that carried the job (a second message of the same job is a copy, not the
claim) and the attempt (one execution of that message: the same message run again means the first attempt's runner
died). Both sides parse what they receive here: the runner a job, the coordinator a report; anything malformed is
refused with the reason, never half-applied.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# What a runner says, in the order a job lives.
STARTED = "started"  # it took the job: the claim
PROGRESS = "progress"  # a mode began or ended: the results so far
RESULT = "result"  # it finished: every mode's result, the sandbox, the log, the machine
FAILED = "failed"  # it could not run the job: no isolation, its fork server died, a build it does not host
MADE_WAY = "made_way"  # an automatic run stopped at a mode boundary for a person's run waiting on its queue
PUT_BACK = "put_back"  # its worker is stopping (cold shutdown): the run goes back to the queue
KINDS = (STARTED, PROGRESS, RESULT, FAILED, MADE_WAY, PUT_BACK)

# Bounds on what a report may carry (the coordinator caps the results further before storing them).
MAX_TEXT = 200_000
MAX_RESULTS = 64


class Malformed(ValueError):
    """A job or a report that does not follow this contract: refused whole."""


@dataclass(frozen=True)
class Limits:
    timeout_s: float
    memory_mb: int
    # Automatic runs: the compile modes and probes together get this long after the eager run (harness.bisect).
    budget_s: float | None = None


@dataclass(frozen=True)
class Job:
    """One bisection to run: everything a runner needs, nothing it must look up."""

    run_id: int
    token: str
    repro: str
    style: str
    device: str  # cpu, cuda, or both (CPU, then cuda for an Inductor failure: R2.4)
    build: str  # a name of the runner's TORCH_BUILDS; "" for its first
    limits: Limits
    # An automatic run makes way for a person's run waiting on its device's queue, at its next mode boundary.
    may_make_way: bool = False

    def as_message(self) -> dict:
        return asdict(self)

    @classmethod
    def from_message(cls, message: object) -> Job:
        if not isinstance(message, dict):
            raise Malformed("a job is a JSON object")
        try:
            limits = message["limits"]
            return cls(
                run_id=_int(message["run_id"]),
                token=_text(message["token"], 100),
                repro=_text(message["repro"], MAX_TEXT),
                style=_choice(message["style"], ("script", "module")),
                device=_choice(message["device"], ("cpu", "cuda", "both")),
                build=_text(message["build"], 40),
                limits=Limits(
                    timeout_s=float(limits["timeout_s"]),
                    memory_mb=_int(limits["memory_mb"]),
                    budget_s=None if limits.get("budget_s") is None else float(limits["budget_s"]),
                ),
                may_make_way=bool(message.get("may_make_way", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise Malformed(f"not a job: {exc.__class__.__name__}: {exc}") from None


@dataclass(frozen=True)
class Report:
    """What a runner says about one job. `runner` is its Celery node name and `boot` that process's start (a runner
    restarted under the same name has another boot: what it held before died with it)."""

    kind: str
    run_id: int
    token: str
    message_id: str
    attempt: str
    runner: str = ""
    boot: str = ""
    body: dict = field(default_factory=dict)

    def as_message(self) -> dict:
        return asdict(self)

    @classmethod
    def from_message(cls, message: object) -> Report:
        if not isinstance(message, dict):
            raise Malformed("a report is a JSON object")
        try:
            body = message.get("body") or {}
            if not isinstance(body, dict):
                raise TypeError("body is not an object")
            return cls(
                kind=_choice(message["kind"], KINDS),
                run_id=_int(message["run_id"]),
                token=_text(message["token"], 100),
                message_id=_text(message["message_id"], 64),
                attempt=_text(message["attempt"], 64),
                runner=_text(message.get("runner", ""), 200),
                boot=_text(message.get("boot", ""), 64),
                body=body,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise Malformed(f"not a report: {exc.__class__.__name__}: {exc}") from None

    def results(self) -> list[dict]:
        """The body's mode results, each a JSON object, at most MAX_RESULTS of them."""
        results = self.body.get("results", [])
        if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
            raise Malformed("results is not a list of objects")
        return results[:MAX_RESULTS]

    def text(self, key: str, cap: int = MAX_TEXT) -> str:
        value = self.body.get(key, "")
        return value[:cap] if isinstance(value, str) else ""

    def mapping(self, key: str) -> dict:
        value = self.body.get(key, {})
        return value if isinstance(value, dict) else {}


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{value!r} is not an integer")
    return value


def _text(value: object, cap: int) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{type(value).__name__} is not text")
    if len(value) > cap:
        raise ValueError(f"text longer than {cap} characters")
    return value


def _choice(value: object, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{value!r} is not one of {', '.join(choices)}")
    return value
