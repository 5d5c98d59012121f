"""Sign in with GitHub (allauth's GitHub provider) against the fake GitHub over HTTP: who gets in, as what,
and losing a role on leaving a team, at the next sign-in and at the daily re-check."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from allauth.socialaccount.models import SocialAccount, SocialToken
from django.contrib.auth.models import User

from rubric_app.demo.github_seeds import DEMO_ORG
from rubric_app.github import credentials, signin
from rubric_app.models import GitHubCredential, TriageDecision
from rubric_app.tasks import apply_decision_task
from tests.factories import make_issue, make_label
from tests.fakegithub import CLIENT_SECRET
from tests.github.conftest import QUEUE
from tests.helpers import wait_until, wait_until_finished

pytestmark = pytest.mark.django_db


def sign_in_with_github(client, fake, login: str):
    """Click "Sign in with GitHub", pick `login` on the fake's authorize page, come back; returns the answer
    to the callback (allauth exchanges the code and reads /user and the memberships over HTTP)."""
    start = client.post("/accounts/github/login/")
    assert start.status_code == 302, start.content[:500]
    authorize = urlsplit(start["Location"])
    assert f"{authorize.scheme}://{authorize.netloc}" == fake.url and authorize.path == "/login/oauth/authorize"
    asked = {k: v[-1] for k, v in parse_qs(authorize.query).items()}
    picked = requests.post(f"{fake.url}/login/oauth/authorize", data={**asked, "login": login}, allow_redirects=False)
    assert picked.status_code == 302
    back = urlsplit(picked.headers["Location"])
    assert back.path == "/accounts/github/login/callback/"
    return client.get(f"{back.path}?{back.query}")


def roles_of(login: str) -> set[str]:
    user = SocialAccount.objects.get(provider="github", uid__isnull=False, extra_data__login=login).user
    return set(user.groups.values_list("name", flat=True))


def test_it_asks_github_for_read_org_and_public_repo_only(client, github_signin):
    start = client.post("/accounts/github/login/")
    asked = parse_qs(urlsplit(start["Location"]).query)
    assert sorted(asked["scope"][0].split()) == ["public_repo", "read:org"]
    assert CLIENT_SECRET not in start["Location"]


def test_it_lands_a_team_member_as_triager(client, github_signin):
    response = sign_in_with_github(client, github_signin, "demo-triager")
    assert response.status_code == 302 and response["Location"] == "/"
    assert roles_of("demo-triager") == {"triager"}
    assert client.get("/").status_code == 200
    # The documented endpoints, with the user's own token.
    assert github_signin.requests_to(rf"^/orgs/{DEMO_ORG}/members/demo-triager$")
    team = github_signin.requests_to(rf"^/orgs/{DEMO_ORG}/teams/pt2-triagers/memberships/demo-triager$")
    assert team and team[-1].headers["authorization"].split()[1] in github_signin.tokens
    assert not github_signin.requests_to(r"^/teams/")


def test_it_lands_a_chair_team_member_as_meeting_chair(client, github_signin):
    sign_in_with_github(client, github_signin, "demo-chair")
    assert roles_of("demo-chair") == {"meeting chair"}


def test_it_lands_an_org_member_in_no_team_as_viewer(client, github_signin):
    sign_in_with_github(client, github_signin, "demo-member")
    assert roles_of("demo-member") == {"viewer"}


def test_it_refuses_an_outsider_and_creates_no_user(client, github_signin):
    users_before = User.objects.count()
    response = sign_in_with_github(client, github_signin, "demo-outsider")
    assert response.status_code == 403
    assert b"not a member of the <strong>pytorch</strong> organisation" in response.content
    assert User.objects.count() == users_before
    assert not SocialAccount.objects.exists()
    assert "_auth_user_id" not in client.session


def test_it_stores_the_token_encrypted_and_none_in_allauths_table(client, github_signin):
    sign_in_with_github(client, github_signin, "demo-triager")
    assert not SocialToken.objects.exists()
    (token,) = github_signin.tokens
    stored = GitHubCredential.objects.get(user__socialaccount__extra_data__login="demo-triager")
    assert token not in stored.access_token_encrypted and credentials.token_for(stored.user) == token
    assert stored.scopes == "read:org,public_repo"


def test_it_reads_roles_with_the_users_own_token_at_the_daily_check(client, github_signin):
    sign_in_with_github(client, github_signin, "demo-member")
    (token,) = github_signin.tokens
    github_signin.requests.clear()
    signin.refresh_github_roles()
    assert {r.actor for r in github_signin.requests_to(r"^/orgs/")} == {"demo-member"}


def test_it_demotes_at_the_next_sign_in(client, github_signin):
    sign_in_with_github(client, github_signin, "demo-triager")
    client.logout()
    github_signin.remove_from_team("demo-triager", DEMO_ORG, "pt2-triagers")
    sign_in_with_github(client, github_signin, "demo-triager")
    assert roles_of("demo-triager") == {"viewer"}
    assert User.objects.filter(socialaccount__provider="github").count() == 1


def test_it_demotes_at_the_periodic_check(client, github_signin, settings):
    sign_in_with_github(client, github_signin, "demo-chair")
    sign_in_with_github(client, github_signin, "demo-triager")
    github_signin.remove_from_team("demo-chair", DEMO_ORG, "pt2-triage-chairs")
    github_signin.org_members[DEMO_ORG].discard("demo-triager")  # left the org altogether
    counts = signin.refresh_github_roles()  # with the site's token (settings.GITHUB_TOKEN)
    assert counts == {"checked": 2, "changed": 2, "failed": 0}
    assert roles_of("demo-chair") == {"viewer"}
    assert roles_of("demo-triager") == set()


def test_it_keeps_the_role_when_github_cannot_answer(client, github_signin):
    sign_in_with_github(client, github_signin, "demo-triager")
    github_signin.inject("error", path=r"^/orgs/", status=502, times=50)
    assert signin.refresh_github_roles()["failed"] == 1
    assert roles_of("demo-triager") == {"triager"}


def test_it_keeps_local_accounts_working(client, triager, github_signin):
    page = client.get("/accounts/login/")
    assert b"Sign in with GitHub" in page.content and b"read:org" in page.content
    assert CLIENT_SECRET.encode() not in page.content
    response = client.post("/accounts/login/", {"username": triager.username, "password": "password"})
    assert response.status_code == 302
    assert client.get("/").status_code == 200


def test_it_offers_no_github_sign_in_when_not_configured(client, settings):
    settings.GITHUB_OAUTH_CLIENT_ID = ""
    assert b"Sign in with GitHub" not in client.get("/accounts/login/").content


def test_it_has_no_local_sign_up(client):
    # Local accounts are made by an operator; GitHub users by signing in.
    page = client.get("/accounts/signup/")
    assert b'name="password1"' not in page.content
    client.post("/accounts/signup/", {"username": "x", "password1": "pw-9f8e7d6c", "password2": "pw-9f8e7d6c"})
    assert not User.objects.filter(username="x").exists()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_demotes_from_the_daily_task_in_the_worker(client, github_signin, celery_worker_process):
    from rubric_app.tasks import refresh_github_roles_task

    sign_in_with_github(client, github_signin, "demo-chair")
    github_signin.remove_from_team("demo-chair", DEMO_ORG, "pt2-triage-chairs")

    refresh_github_roles_task.delay()

    wait_until(lambda: roles_of("demo-chair") == {"viewer"}, timeout=60)


def test_it_keeps_tokens_and_the_client_secret_out_of_logs_and_pages(client, github_signin, caplog):
    caplog.set_level("DEBUG")
    landed = sign_in_with_github(client, github_signin, "demo-chair")
    page = client.get(landed["Location"]).content.decode()
    refused = sign_in_with_github(client.__class__(), github_signin, "demo-outsider").content.decode()
    for secret in [*github_signin.tokens, *github_signin.user_tokens, CLIENT_SECRET]:
        assert secret not in caplog.text and secret not in page and secret not in refused


def test_it_writes_label_events_as_the_tokens_user(github_signin):
    token, _ = github_signin.issue_user_token("demo-triager")
    github_signin.add_issue(7)
    github_signin.add_label("module: inductor")
    me = requests.get(f"{github_signin.url}/user", headers={"Authorization": f"token {token}"}, timeout=5)
    assert me.json()["login"] == "demo-triager"
    answer = requests.post(
        f"{github_signin.url}/repos/{github_signin.repo}/issues/7/labels",
        json={"labels": ["module: inductor"]},
        headers={"Authorization": f"Bearer {token}"},
        timeout=5,
    )
    assert answer.status_code == 200
    events = requests.get(
        f"{github_signin.url}/repos/{github_signin.repo}/issues/7/events",
        headers={"Authorization": f"token {token}"},
        timeout=5,
    ).json()
    # The issue's own labels were added by its author when it was opened; the write is the token's user's.
    assert [(e["event"], e["label"]["name"]) for e in events if e["actor"]["login"] == "demo-triager"] == [
        ("labeled", "module: inductor")
    ]
    github_signin.revoke(token)
    assert requests.get(f"{github_signin.url}/user", headers={"Authorization": f"token {token}"}).status_code == 401


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            "pt2-triagers=triager,pt2-triage-chairs=meeting chair",
            {"pt2-triagers": "triager", "pt2-triage-chairs": "meeting chair"},
        ),
        (" a = viewer ,", {"a": "viewer"}),
        ("", {}),
    ],
)
def test_it_parses_triage_teams(raw, expected):
    from triage_site.settings import parse_triage_teams

    assert parse_triage_teams(raw) == expected


@pytest.mark.parametrize("raw", ["pt2-triagers", "pt2-triagers=admin"])
def test_it_refuses_a_triage_team_without_a_known_role(raw):
    from django.core.exceptions import ImproperlyConfigured

    from triage_site.settings import parse_triage_teams

    with pytest.raises(ImproperlyConfigured, match="slug=role"):
        parse_triage_teams(raw)


def test_it_refuses_and_strips_the_roles_of_someone_who_left_the_org(client, github_signin):
    sign_in_with_github(client, github_signin, "demo-triager")
    client.logout()
    github_signin.org_members[DEMO_ORG].discard("demo-triager")
    assert sign_in_with_github(client, github_signin, "demo-triager").status_code == 403
    assert roles_of("demo-triager") == set()
    assert "_auth_user_id" not in client.session


def test_it_shows_a_refusal_by_github_on_the_dashboards_page(client, github_signin):
    start = client.post("/accounts/github/login/")
    state = parse_qs(urlsplit(start["Location"]).query)["state"][0]
    response = client.get(f"/accounts/github/login/callback/?error=access_denied&state={state}", follow=True)
    assert b"PT2 triage" in response.content and b"Back to sign in" in response.content


@pytest.mark.worker
@pytest.mark.usefixtures("signed_in_worker")
@pytest.mark.django_db(transaction=True)
def test_it_writes_as_the_user_who_signed_in_with_github_through_the_worker(client, github_signin):
    """Sign-in to label: the token from sign-in, stored encrypted, is what the worker writes with,
    and the demo GitHub records the signed-in user as the label's actor."""
    sign_in_with_github(client, github_signin, "demo-triager")
    user = SocialAccount.objects.get(extra_data__login="demo-triager").user
    github_signin.add_issue(1101, labels=["oncall: pt2"])
    issue = make_issue(1101, labels=("oncall: pt2",))
    make_label("module: inductor", github=github_signin)
    decision = TriageDecision.objects.create(
        issue=issue, user=user, labels_seen=["oncall: pt2"], labels_added=["module: inductor"]
    )

    apply_decision_task.apply_async((decision.pk,), queue=QUEUE)
    decision = wait_until_finished(decision, timeout=60)

    assert decision.status == TriageDecision.Status.APPLIED, decision.result_message
    assert github_signin.label_events == [
        {"issue": 1101, "event": "labeled", "label": "module: inductor", "actor": "demo-triager"}
    ]


def test_it_keeps_the_client_secret_out_of_a_repros_environment():
    from rubric_app.bisection.sandbox import scrubbed_env

    host = {"PATH": "/usr/bin", "GITHUB_OAUTH_CLIENT_SECRET": CLIENT_SECRET, "TOKEN_ENCRYPTION_KEY": "k" * 44}
    env = scrubbed_env("/tmp/repro", host)
    assert CLIENT_SECRET not in env.values() and not {"GITHUB_OAUTH_CLIENT_SECRET", "TOKEN_ENCRYPTION_KEY"} & set(env)


def test_it_lets_no_one_in_when_github_cannot_say_their_memberships(client, github_signin):
    github_signin.inject("error", path=r"^/orgs/", status=502, times=50)
    response = sign_in_with_github(client, github_signin, "demo-triager")
    assert response.status_code == 503 and b"could not tell us" in response.content
    assert not SocialAccount.objects.exists() and "_auth_user_id" not in client.session
