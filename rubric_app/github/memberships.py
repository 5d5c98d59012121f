"""Who someone is on GitHub: their org and team memberships, asked with their own token (sign-in's github_role,
signin.py, and the role re-checks, identity.py)."""

from __future__ import annotations

import json
from urllib.parse import quote

from rubric_app.github.client import user_client
from rubric_app.github.data import GitHubError, MalformedResponse


def is_org_member(*, token: str, org: str, login: str) -> bool:
    """True when `login` is a member of `org` (GET /orgs/{org}/members/{username}: 204 yes, 404 no).

    GitHub answers 302 when the token's own user is not a member of the org (someone removed from it
    asking with their own token): the redirect names the public list, GET /orgs/{org}/public_members/
    {username}, asked here directly (PyGithub does not follow a 302, and a Location is not trusted to
    stay on GitHub): 204 is a public member, 404 is not a member. A 302 is an answer, never "unavailable".
    Raises GitHubError for a token GitHub refuses (401) or a GitHub that fails.
    """
    cli = user_client(token)
    answer = cli._call(cli._reader, "GET", f"/orgs/{quote(org)}/members/{quote(login)}")
    if answer.status in (301, 302, 307):
        answer = cli._call(cli._reader, "GET", f"/orgs/{quote(org)}/public_members/{quote(login)}")
    if answer.status == 204:
        return True
    if answer.status == 404:
        return False
    raise GitHubError(f"GitHub answered {answer.status} for {org}'s membership of {login}", answer.status)


def is_team_member(*, token: str, org: str, team_slug: str, login: str) -> bool:
    """True when `login` is an active member of the team (GET /orgs/{org}/teams/{team_slug}/memberships/{username};
    a pending invitation does not count). 404: not a member, or a team the token cannot see."""
    cli = user_client(token)
    answer = cli._call(cli._reader, "GET", f"/orgs/{quote(org)}/teams/{quote(team_slug)}/memberships/{quote(login)}")
    if answer.status == 404:
        return False
    if answer.status != 200:
        raise GitHubError(
            f"GitHub answered {answer.status} for team {team_slug}'s membership of {login}", answer.status
        )
    try:
        return json.loads(answer.text).get("state") == "active"
    except (ValueError, AttributeError):
        raise MalformedResponse(f"GitHub's answer for team {team_slug}'s membership is not JSON", 200) from None
