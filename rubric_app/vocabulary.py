"""Who may speak for PyTorch's automation on an issue, and who is a maintainer (pure Python: no Django, no app
imports, so the rubric engine and the bisection package read it too).

Anyone can open a comment with "🤖 PT2 Repro Agent" or write "My agent was unable to reproduce this on <sha>": what
the text says is a claim until GitHub's own data says who posted it. AUTOMATION_ACCOUNTS (settings) names the
accounts that speak for each part of the automation (docs/engine.md, "Who may speak for the automation"):

- repro_agent: the PT2 Repro Agent's comments (in PyTorch's threads every one is posted by one account);
- agent: other agents' results, "My agent was unable to reproduce this on <sha>" and CompilerBisector output
  (posted by maintainers who run their own agents);
- bot: the triage bot, whose label events say which labels it added. Any GitHub App (a login ending in "[bot]") is a
  bot too: GitHub reserves that suffix for apps, which only the repository's admins install.

GitHub logins are case-insensitive: every comparison here folds case.
"""

from __future__ import annotations

from dataclasses import dataclass

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
