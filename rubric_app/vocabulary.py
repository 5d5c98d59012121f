"""The domain's words, spelled once: the labels the dashboard reasons about, the queue's lanes and the predicates
every layer asks ("is this a component label?", "is this login a bot?").

Pure Python, at the bottom of the house beside rubric/ and bisection/: the engine, the bisection verdicts, the
models, the sync and the pages all import their names from here instead of re-spelling them. The label catalog
itself (every name with its description) is data: rubric/reading/catalog.py reads it and says which labels the
dashboard may suggest or apply (allowed_for_triage).

Who may speak for PyTorch's automation: anyone can open a comment with "🤖 PT2 Repro Agent" or write "My agent
was unable to reproduce this on <sha>": what the text says is a claim until GitHub's own data says who posted it.
AUTOMATION_ACCOUNTS (settings) names the accounts that speak for each part of the automation (docs/engine.md, "Who
may speak for the automation"):

- repro_agent: the PT2 Repro Agent's comments (in PyTorch's threads every one is posted by one account);
- agent: other agents' results, "My agent was unable to reproduce this on <sha>" and CompilerBisector output
  (posted by maintainers who run their own agents);
- bot: the triage bot, whose label events say which labels it added. Any GitHub App (a login ending in "[bot]") is a
  bot too: GitHub reserves that suffix for apps, which only the repository's admins install.

GitHub logins are case-insensitive: every comparison here folds case.
"""

from __future__ import annotations

from dataclasses import dataclass

# The queues this dashboard triages (settings.GITHUB_QUEUE_LABELS by default), and the other oncalls it routes to.
PT2_ONCALL = "oncall: pt2"
CPU_INDUCTOR_ONCALL = "oncall: cpu inductor"
EXPORT_ONCALL = "oncall: export"
DISTRIBUTED_ONCALL = "oncall: distributed"
QUEUE_LABELS = (PT2_ONCALL, CPU_INDUCTOR_ONCALL)
# G13: never a redirect (`module: ci` instead); distributed issues get DISTRIBUTED_ONCALL, never one of its sub-queues.
RELENG_ONCALL = "oncall: releng"
DISTRIBUTED_SUBQUEUES = (
    "oncall: distributed parallelisms",
    "oncall: distributed infra",
    "oncall: distributed checkpointing",
)

# Status labels: G6 adds `triaged`; R11's flag for the weekly meeting; what only the meeting may add.
TRIAGED = "triaged"
TRIAGE_REVIEW = "triage review"
NEEDS_REPRODUCTION = "needs reproduction"
HIGH_PRIORITY = "high priority"
LOW_PRIORITY = "low priority"
# G12: the release manager's short list, a flag of its own beside R11's `triage review`.
RELEASE_TRIAGE = "release triage"
# G13: what PyTorch's triage bot never adds (a human's judgement after reading the issue); humans still may.
ACTIONABLE = "actionable"
NEEDS_DESIGN = "needs design"
NEEDS_RESEARCH = "needs research"
HUMAN_ONLY = (ACTIONABLE, NEEDS_DESIGN, NEEDS_REPRODUCTION, NEEDS_RESEARCH)

# The components (R1-R5) and the other `module:` labels the rules name.
DYNAMO = "module: dynamo"
INDUCTOR = "module: inductor"
DYNAMIC_SHAPES = "module: dynamic shapes"
PT2_DISPATCHER = "module: pt2-dispatcher"
DECOMPOSITIONS = "module: decompositions"
# The core components: a PT2 issue normally gets one of these, two when both are clearly shown (R1-R5).
CORE_COMPONENTS = (DYNAMO, INDUCTOR, DYNAMIC_SHAPES, PT2_DISPATCHER, DECOMPOSITIONS)
FX = "module: fx"
FUNCTORCH = "module: functorch"
HELION = "module: helion"
CUDA_GRAPHS = "module: cuda graphs"
COMPILE_UX = "module: compile ux"
MODULE_REGRESSION = "module: regression"
# R5.1: the layer labels that go next to the `module: pt2-dispatcher` umbrella.
AOTDISPATCH = "module: aotdispatch"
FUNCTIONALIZATION = "module: functionalization"
FAKE_TENSOR = "module: fakeTensor"
CUSTOM_OPERATORS = "module: custom-operators"
DISPATCHER_LAYERS = (AOTDISPATCH, FUNCTIONALIZATION, FAKE_TENSOR, CUSTOM_OPERATORS)
# R7: the domain and feature labels a PT2 issue carries for visibility beside its component.
FLEX_ATTENTION = "module: flex attention"
DTENSOR = "module: dtensor"
FSDP = "module: fsdp"
DDP = "module: ddp"
DETERMINISM = "module: determinism"
COMPILE_TIME = "module: compile-time"
MEMORY_USAGE = "module: memory usage"
# Labels PyTorch's history carries that the harvested issues are scored against (rubric/offline/evaluation.py).
CORRECTNESS_SILENT = "module: correctness (silent)"
PT2_ACCURACY = "module: pt2 accuracy"
MODULE_CPU_INDUCTOR = "module: cpu inductor"
# G10: edge cases and numerical accuracy.
EDGE_CASES = "module: edge cases"
NUMERICAL_STABILITY = "module: numerical-stability"
# G11: the labels triagers often miss (MODULE_REGRESSION is one), and G12's gate reads DOCS as no bug.
MODULE_CRASH = "module: crash"
PERFORMANCE = "module: performance"
WINDOWS = "module: windows"
MODULE_TESTS = "module: tests"
AUTOGRAD = "module: autograd"
DOCS = "module: docs"
HAS_WORKAROUND = "has workaround"
# G12: what is no bug (PyTorch's issue forms name them): never on the release manager's list.
FEATURE = "feature"
ENHANCEMENT = "enhancement"
FUNCTION_REQUEST = "function request"
# R12: a fuzzer's report (its repro's tolerances, not a silently wrong result for R11).
FUZZER_TOPIC = "topic: fuzzer"

# PyTorch's automation (rubric/reading/automation.py reads it): the LLM triage bot marks what it labelled with
# BOT_TRIAGED; triagers audit it with BOT_MISLABELED; the PT2 Repro Agent's labels start with REPRO_AGENT_PREFIX and
# ask for AGENT_INCORRECT when its verdict is wrong. The two feedback labels are not in the shipped catalog (nothing
# suggests them): a person may add exactly these, where the repository has them.
BOT_TRIAGED = "bot-triaged"
BOT_MISLABELED = "bot-mislabeled"
REPRO_AGENT_PREFIX = "repro:agent:"
AGENT_INCORRECT = "repro:agent:h100:incorrect"
# G13: the bot's run on an issue was stopped before it finished; a human picks the issue up (its own queue lane).
BOT_TRIAGE_BLOCKED = "bot-triage-blocked"
FEEDBACK_LABELS = frozenset({BOT_MISLABELED, AGENT_INCORRECT})

# What runs of one repro on several torch builds can say (Issue.build_finding, bisection/builds.py), and the reply
# of our own that asks a reporter to confirm a fix (rubric/reading/catalog.py OWN_REPLIES).
REGRESSION = "regression"
MAY_BE_FIXED = "may_be_fixed"
CONFIRM_FIXED_REPLY = "confirm_fixed"
# The duplicate reply of our own for an original closed as fixed: try the build with the fix (issue 52).
DUPLICATE_OF_FIXED_REPLY = "duplicate_of_fixed"


class Kind:
    """What one finding of a rule says (rubric/reading/facts.py Finding.kind); the engine stores its ADD and AVOID
    answers as Suggestion rows of the same kind. The values are the learned labeler's feature names too: never re-spell
    them.
    """

    ADD = "add"  # a component, domain or visibility label to add, weighed by the engine
    AVOID = "avoid"  # a label not to add, with the reason a triager would be tempted (G8, R1.5, R3.3, R5, G5...)
    ROUTE = "route"  # an oncall: label to hand off or redirect to (G0, G2, G5, R2.4, R6.3, R10)
    FLAG = "flag"  # a status label: `triage review` (R11), `needs reproduction` (G9), `low priority` (R12.5)
    CHECK = "check"  # a checklist item, with its state
    HOLD = "hold"  # a label not to pre-select, with the reason (a verdict the thread contradicts)


class Route:
    """Where an issue goes. The engine's answer (Assessment.route, Issue.suggested_route) is one of PT2, CPU, HANDOFF,
    TRANSFER and SKIP; the triage form's route choice is one of PT2, CPU, HANDOFF, or a route that stops labelling
    (or asks for a reproduction: REPRODUCTION labels as the lane does)."""

    PT2 = "pt2"  # stays in oncall: pt2 through labelling (G3)
    CPU = "cpu inductor"  # PT2's own CPU Inductor sub-queue (R2.4, R10): labels stay
    HANDOFF = "handoff"  # to another oncall: exactly that oncall label, no module labels, no triaged (G5)
    TRANSFER = "transfer"  # to another repository, then stop (G2)
    SKIP = "skip"  # in another oncall's queue already: nothing (G0)
    QUESTION = "question"  # a usage question: close with the forum reply (G1)
    MORE_INFO = "more info"  # unclear: ask for a repro and logs (G1)
    DUPLICATE = "duplicate"  # close as a duplicate of another issue, with the standard comment
    CONFIRM_FIXED = "confirm fixed"  # passes on a newer torch build: ask the reporter to confirm there
    REPRODUCTION = "reproduction"  # no self-contained reproduction: `needs reproduction` and the skill's reply (G9)
    EXPECTED_NUMERICS = "expected numerics"  # expected floating-point behaviour: the numerical-accuracy reply (G10)
    # The lanes that keep labelling (the issue stays in PT2's queues).
    LANES = (PT2, CPU)
    # The routes that send a reply, a close or a transfer instead of labels.
    STOPS_LABELLING = frozenset({QUESTION, MORE_INFO, TRANSFER, DUPLICATE, CONFIRM_FIXED, EXPECTED_NUMERICS})


# The queue page's lanes by code, in the order the page lists them (models.LANES says what each one lists).
LANE_PT2, LANE_CPU, LANE_REVIEW, LANE_REPRO, LANE_BOT, LANE_BLOCKED, LANE_FIXED, LANE_ALL, LANE_MINE = (
    "pt2",
    "cpu",
    "review",
    "repro",
    "bot",
    "blocked",
    "fixed",
    "all",
    "mine",
)

# Who may speak for PyTorch's automation (AUTOMATION_ACCOUNTS in settings; docs/engine.md).
REPRO_AGENT = "repro_agent"
AGENT = "agent"
BOT = "bot"
ROLES = (REPRO_AGENT, AGENT, BOT)

# PyTorch's accounts, as its threads show them: every "🤖 PT2 Repro Agent" comment in the harvested PT2 threads
# (tests/data) is karthickai's; the "My agent was unable to reproduce this on <sha>" comments are jansel's; the
# bots that label and comment on pytorch/pytorch are pytorch-bot (the GitHub App and its older user account) and the
# workflows' github-actions[bot], where the LLM triage workflow runs.
DEFAULT_AUTOMATION_ACCOUNTS = (
    "repro_agent=karthickai;"
    "agent=jansel;"
    "bot=pytorch-bot[bot],pytorchbot,pytorch-bot,pytorch-auto-revert,github-actions[bot]"
)

# GitHub's author_association values that mean the poster maintains the repository (member of its organisation,
# its owner, or a collaborator with write access). CONTRIBUTOR, FIRST_TIME_CONTRIBUTOR, FIRST_TIMER and NONE do not.
MAINTAINER_ASSOCIATIONS = frozenset({"MEMBER", "OWNER", "COLLABORATOR"})


@dataclass(frozen=True)
class AutomationAccounts:
    """The logins (lowercase) allowed to speak as each part of PyTorch's automation."""

    repro_agent: frozenset[str] = frozenset()
    agent: frozenset[str] = frozenset()
    bot: frozenset[str] = frozenset()

    def may_speak_as(self, role: str, login: str) -> bool:
        """Whether `login` may post `role`'s facts: the Repro Agent's account for the Repro Agent; it, the agent
        accounts and the bots for another agent's; the bots for the bot."""
        name = (login or "").strip().lower()
        if not name:
            return False
        if role == REPRO_AGENT:
            return name in self.repro_agent
        if role == AGENT:
            return name in self.agent or name in self.repro_agent or is_bot(name, self)
        if role == BOT:
            return is_bot(name, self)
        raise ValueError(f"unknown automation role {role!r}: one of {', '.join(ROLES)}")

    def is_automation(self, login: str) -> bool:
        """Whether `login` is one of the automation's accounts, in any role."""
        return any(self.may_speak_as(role, login) for role in ROLES)


def parse_automation_accounts(spec: str) -> AutomationAccounts:
    """AUTOMATION_ACCOUNTS as AutomationAccounts: "repro_agent=a;agent=b,c;bot=d[bot]" (a role left out has no
    account). Raises ValueError saying what is wrong: an unknown role, a role given twice, a part without "="."""
    found: dict[str, frozenset[str]] = {}
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        role, sep, logins = (s.strip() for s in part.partition("="))
        if not sep or role not in ROLES:
            raise ValueError(
                f"AUTOMATION_ACCOUNTS: {part!r} is not role=login,login with role one of {', '.join(ROLES)}"
            )
        if role in found:
            raise ValueError(f"AUTOMATION_ACCOUNTS names the role {role!r} twice")
        found[role] = frozenset(name.strip().lower() for name in logins.split(",") if name.strip())
    return AutomationAccounts(**found)


DEFAULT = parse_automation_accounts(DEFAULT_AUTOMATION_ACCOUNTS)
# The accounts of PyTorch's bots by default, beside any GitHub App (whose login ends in "[bot]").
BOT_ACCOUNTS = DEFAULT.bot


def is_module(name: str) -> bool:
    """A component label (`module: ...`): what G4 asks every triaged PT2 issue to carry."""
    return name.startswith("module:")


# `module:` by name, yet each says what kind of bug it is, not which component owns it: on a meeting card it never
# stands for the component G4 asks for (issue 53: #170092 was decided with `module: crash` and no component).
SILENT_CORRECTNESS = "module: correctness (silent)"
CATEGORY_LABELS = frozenset({MODULE_CRASH, SILENT_CORRECTNESS, MODULE_REGRESSION, EDGE_CASES})


def is_component(name: str) -> bool:
    """A `module:` label that names a component (what owns the fix), not a category of bug (CATEGORY_LABELS)."""
    return is_module(name) and name not in CATEGORY_LABELS


def is_oncall(name: str) -> bool:
    """An oncall queue's label (`oncall: ...`): a route, never a checkbox."""
    return name.startswith("oncall:")


def is_home_oncall(name: str) -> bool:
    """One of the two queues this dashboard triages (G5 hands issues off to the others)."""
    return name in QUEUE_LABELS


def is_bot(login: str, accounts: AutomationAccounts = DEFAULT) -> bool:
    """Whether `login` is a bot: a GitHub App ("...[bot]") or one of the accounts' bots. The one definition the
    automation reader (the labels the triage bot added) and the issue page (what the bot labelled) share."""
    name = (login or "").strip().lower()
    return name.endswith("[bot]") or name in accounts.bot


def is_maintainer(association: str) -> bool:
    """Whether GitHub's author_association says the poster maintains the repository."""
    return (association or "").strip().upper() in MAINTAINER_ASSOCIATIONS


def repro_counts(*, author: str, association: str, reporter: str, accounts: AutomationAccounts = DEFAULT) -> bool:
    """Whether a repro posted by `author` is one the dashboard runs by default and may conclude from: the
    reporter's, a maintainer's, or one of the automation's accounts'. Another commenter's is only offered."""
    name = (author or "").strip().lower()
    if not name:
        return False
    return name == (reporter or "").strip().lower() or is_maintainer(association) or accounts.is_automation(name)


def is_automation_label(name: str) -> bool:
    """A label PyTorch's automation adds (the bot's mark or a Repro Agent verdict): its events say who added it."""
    return name == BOT_TRIAGED or name.startswith(REPRO_AGENT_PREFIX)


# The Celery queues of a bisection by device ("cpu", "cuda", "both": BisectionRun.Device): a GPU box has a CPU too,
# so "both" goes to gpu. Automatic runs (runs/auto_bisect.py) wait in queues of their own, which a worker reads
# after the human ones, and re-checks on a new build (runs/build_checks.py) in the last ones it reads.
RUN_QUEUES = {"cpu": "cpu", "cuda": "gpu", "both": "gpu"}
AUTO_RUN_QUEUES = {"cpu": "cpu_auto", "cuda": "gpu_auto", "both": "gpu_auto"}
RECHECK_RUN_QUEUES = {"cpu": "cpu_recheck", "cuda": "gpu_recheck", "both": "gpu_recheck"}
# Each device queue, and every queue whose workers run its bisections: a person's, the automatic ones, the re-checks.
BISECTION_QUEUES = {
    queue: {
        name
        for table in (RUN_QUEUES, AUTO_RUN_QUEUES, RECHECK_RUN_QUEUES)
        for device, name in table.items()
        if RUN_QUEUES[device] == queue
    }
    for queue in dict.fromkeys(RUN_QUEUES.values())
}
# The queue of GitHub writes (one worker, concurrency 1: what paces them), and the coordinator's: everything else that
# needs the database, runners' reports and heartbeats included.
GITHUB_QUEUE = "github"
COORDINATOR_QUEUE = "default"
# A worker reading these queues and no other is a bisection runner: it holds no database (runs/runner.py).
RUNNER_QUEUES = frozenset(name for served in BISECTION_QUEUES.values() for name in served)
# The queues whose liveness the dashboard shows: bisections (cpu, gpu) and GitHub writes.
WORKER_QUEUES = ("cpu", "gpu", GITHUB_QUEUE)
