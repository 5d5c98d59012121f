"""The contract between the coordinator and a bisection runner: a self-contained job out, signed reports back (pure
Python).

A runner holds no database and no secret but its own (docs/bisection.md#runners): everything it needs to run a repro
is in the job, and everything the dashboard learns of the run comes back in reports, which the coordinator checks
before it records anything. Each message a runner sends (a report on a job, or its heartbeat) travels in an Envelope
signed with the secret its operator registered it with (HMAC-SHA256 over the canonical JSON): the gateway
(runs/gateway.py) forwards only envelopes that the runner whose queue they came from signed, recently. Inside, a
report names its run, the assignment's token (a report of an earlier assignment is stale), the message that carried
the job (a second message of the same job is a copy, not the claim) and the attempt (one execution of that message:
the same message run again means the first attempt's runner died). Both sides parse what they receive here: the
runner a job, the coordinator an envelope and a report; anything malformed is refused with the reason, never
half-applied.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import time
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
# What a runner may send at all: an envelope larger than this is refused before it is read.
MAX_MESSAGE_BYTES = 1_000_000
# An envelope signed longer ago than this (or this far in the future: clocks apart) is refused: a replay, or a
# runner whose clock is wrong (it says so on the runners page).
MAX_AGE_S = 600
# What an envelope carries.
REPORT = "report"
HEARTBEAT = "heartbeat"


class Malformed(ValueError):
    """A job or a report that does not follow this contract: refused whole."""


class Forged(Malformed):
    """An envelope its runner did not sign (or signed too long ago): refused whole."""


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
        """The body's mode results, at most MAX_RESULTS of them: each a JSON object naming its mode and status, as the
        harness writes them (the verdict reads both)."""
        results = self.body.get("results", [])
        if not isinstance(results, list) or len(results) > MAX_RESULTS:
            raise Malformed(f"results is not a list of at most {MAX_RESULTS} objects")
        for index, result in enumerate(results):
            if not isinstance(result, dict):
                raise Malformed(f"result {index} is not an object")
            for key in ("mode", "status"):
                if not isinstance(result.get(key), str) or not result[key]:
                    raise Malformed(f"result {index} has no {key}")
        return results

    def text(self, key: str, cap: int = MAX_TEXT) -> str:
        value = self.body.get(key, "")
        return value[:cap] if isinstance(value, str) else ""

    def mapping(self, key: str) -> dict:
        value = self.body.get(key, {})
        return value if isinstance(value, dict) else {}

    def names(self, key: str, cap: int = 2000) -> tuple[str, ...]:
        """A list of short names (the installed packages), or () when the body's value is anything else."""
        value = self.body.get(key, [])
        if not isinstance(value, list) or len(value) > cap or not all(isinstance(x, str) for x in value):
            return ()
        return tuple(x[:100] for x in value)


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


@dataclass(frozen=True)
class Envelope:
    """One message from a runner: who sent it (its registered name), what it carries (a report or a heartbeat), when
    it was signed (its clock, in seconds), and the body."""

    runner: str
    kind: str
    sent_at: float
    body: dict

    def signed(self, secret: str) -> dict:
        """The message to send: the envelope and its signature."""
        message = asdict(self)
        return {**message, "signature": _signature(message, secret)}

    @classmethod
    def opened(cls, message: object, *, runner: str, secret: str, now: float | None = None) -> Envelope:
        """The envelope of `message`, sent by runner `runner` (the queue it came from) and signed with `secret` within
        MAX_AGE_S of `now`; Malformed (or Forged) says why it is refused."""
        if not isinstance(message, dict):
            raise Malformed("a runner's message is a JSON object")
        try:
            envelope = cls(
                runner=_text(message["runner"], 40),
                kind=_choice(message["kind"], (REPORT, HEARTBEAT)),
                sent_at=_number(message["sent_at"]),
                body=_mapping(message["body"]),
            )
            signature = _text(message["signature"], 64)
        except (KeyError, TypeError, ValueError) as exc:
            raise Malformed(f"not a runner's message: {exc.__class__.__name__}: {exc}") from None
        if envelope.runner != runner:
            raise Forged(f"names runner {envelope.runner!r} but came from runner {runner!r}'s queue")
        if not hmac.compare_digest(signature, _signature(asdict(envelope), secret)):
            raise Forged(f"not signed with runner {runner!r}'s secret")
        age = (time.time() if now is None else now) - envelope.sent_at
        if abs(age) > MAX_AGE_S:
            raise Forged(f"signed {age:.0f} s ago (a replay, or the runner's clock is off by that much)")
        return envelope


def _signature(message: dict, secret: str) -> str:
    canonical = json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hmac.new(secret.encode(), canonical.encode(), hashlib.sha256).hexdigest()


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TypeError(f"{value!r} is not a number")
    return float(value)


def _mapping(value: object) -> dict:
    if not isinstance(value, dict):
        raise TypeError("body is not an object")
    return value
