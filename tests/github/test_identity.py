"""Identity is current (issue 35, attacks 3, 4, 5): through allauth's real HTTP flow against the fake GitHub.

A removal from the team or the org costs the role mid-session (within identity.ROLE_RECHECK on the pages, before
every write on the web and on the worker, in both GITHUB_WRITE_AS modes); GitHub's 302 to a non-member's membership
question is "not a member", not "unavailable"; when GitHub truly cannot answer, writes are refused and say why; a
GitHub user never signs in with a password; allauth's sign-up form never appears, and no token sits in the session.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from allauth.socialaccount.models import SocialAccount, SocialToken
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone

from rubric_app.demo.github_people import DASHBOARD_LOGIN
from rubric_app.demo.github_seeds import DEMO_ORG
from rubric_app.github import identity, memberships, signin
from rubric_app.models import GitHubCredential, GitHubWrite, Suggestion, TriageDecision
from rubric_app.tasks import apply_decision_task
from rubric_app.web.middleware import ROLE_CHECKED_KEY
from tests.factories import make_issue, make_label, make_user
from tests.fakegithub import TOKEN
from tests.github.test_signin import roles_of, sign_in_with_github
from tests.helpers import child_database_url, running_worker, wait_until_finished

pytestmark = pytest.mark.django_db


def _user(login: str) -> User:
    return SocialAccount.objects.get(provider="github", extra_data__login=login).user


def _time_passes(client, login: str, *, session: bool = True, answer: timedelta = timedelta(minutes=11)) -> None:
    """As if `answer` had passed since GitHub last answered for `login` (the database's record, which every
    process reads) and, with session, since this session's pages last checked."""
    GitHubCredential.objects.filter(user=_user(login)).update(roles_checked_at=timezone.now() - answer)
    if session:
        stored = client.session
        stored[ROLE_CHECKED_KEY] = stored.get(ROLE_CHECKED_KEY, 0) - identity.ROLE_RECHECK.total_seconds() - 1
        stored.save()


def _apply(client, issue, labels=("module: inductor",)):
    return client.post(
        f"/issues/{issue.number}/apply",
        {"labels": list(labels), "route": "pt2", "handoff_to": "", "labels_seen": json.dumps(issue.label_names())},
    )


@pytest.fixture
def suggested_issue(github_signin):
    """An issue in the queue, on the fake GitHub and in the mirror, and the label a triager applies."""
    github_signin.add_issue(3501, labels=["oncall: pt2"])
    for name in ("module: inductor", "triaged"):
        make_label(name, github=github_signin)
    issue = make_issue(3501, labels=("oncall: pt2",))
    Suggestion.objects.create(issue=issue, label="module: inductor", rule_id="R2.2", confidence=0.9, evidence="x")
    return issue


# --- a 302 is an answer -----------------------------------------------------------------------------------------


def test_it_reads_githubs_302_for_a_removed_member_as_not_a_member(client, github_signin):
    sign_in_with_github(client, github_signin, "demo-triager")
    client.logout()
    github_signin.remove_from_org("demo-triager", DEMO_ORG)
    github_signin.requests.clear()

    response = sign_in_with_github(client, github_signin, "demo-triager")

    # Before: GitHub's 302 was read as "GitHub could not tell" (503) and the role stayed.
    assert response.status_code == 403 and b"not a member" in response.content
    assert [r.status for r in github_signin.requests_to(rf"^/orgs/{DEMO_ORG}/members/demo-triager$")] == [302]
    assert github_signin.requests_to(rf"^/orgs/{DEMO_ORG}/public_members/demo-triager$")
    assert roles_of("demo-triager") == set() and "_auth_user_id" not in client.session


def test_it_counts_a_public_member_asked_about_by_an_outsiders_token(github_signin):
    token = github_signin.issue_token("demo-outsider")
    github_signin.public_members[DEMO_ORG] = {"demo-member"}

    assert memberships.is_org_member(token=token, org=DEMO_ORG, login="demo-member") is True
    assert memberships.is_org_member(token=token, org=DEMO_ORG, login="demo-triager") is False  # private: not seen


def test_it_removes_the_role_at_the_daily_check_once_github_answers_302(client, github_signin):
    sign_in_with_github(client, github_signin, "demo-chair")
    github_signin.remove_from_org("demo-chair", DEMO_ORG)
    # With the user's own token (the default); before, this counted as "failed" and the role stayed.
    assert signin.refresh_github_roles() == {"checked": 1, "changed": 1, "failed": 0}
    assert roles_of("demo-chair") == set()


# --- mid-session, on the web -------------------------------------------------------------------------------------


def test_it_demotes_a_triager_removed_from_the_team_at_the_next_page_after_ten_minutes(
    client, github_signin, suggested_issue
):
    sign_in_with_github(client, github_signin, "demo-triager")
    assert client.get(f"/issues/{suggested_issue.number}").status_code == 200
    github_signin.remove_from_team("demo-triager", DEMO_ORG, "pt2-triagers")

    # Within ten minutes of the last check the page does not ask GitHub again.
    github_signin.requests.clear()
    client.get("/")
    assert not github_signin.requests_to(r"^/orgs/")

    _time_passes(client, "demo-triager")
    assert client.get("/").status_code == 200  # still signed in: a member of the org, in no team
    assert roles_of("demo-triager") == {"viewer"}
    assert github_signin.requests_to(r"^/orgs/")
    assert _apply(client, suggested_issue).status_code == 403
    assert not TriageDecision.objects.exists() and not github_signin.label_events


def test_it_rechecks_before_a_write_whatever_the_page_check_says(client, github_signin, suggested_issue):
    sign_in_with_github(client, github_signin, "demo-triager")
    github_signin.remove_from_team("demo-triager", DEMO_ORG, "pt2-triagers")
    # The page check is fresh; GitHub's last answer is 61 s old: too old for a write.
    _time_passes(client, "demo-triager", session=False, answer=identity.WRITE_TRUST + timedelta(seconds=1))

    _apply(client, suggested_issue)

    decision = TriageDecision.objects.get()
    assert decision.status == TriageDecision.Status.REFUSED
    assert "now give you the viewer role" in decision.result_message
    page = client.get(f"/issues/{suggested_issue.number}").content.decode()
    assert "now give you the viewer role" in page  # the page says why
    assert roles_of("demo-triager") == {"viewer"}


def test_it_signs_out_someone_removed_from_the_org_mid_session(client, github_signin):
    sign_in_with_github(client, github_signin, "demo-chair")
    github_signin.remove_from_org("demo-chair", DEMO_ORG)
    _time_passes(client, "demo-chair")

    response = client.get("/")

    assert response.status_code == 403 and b"not a member" in response.content
    assert "_auth_user_id" not in client.session and roles_of("demo-chair") == set()
    assert client.get("/").status_code == 302  # to the sign-in page


def test_it_refuses_writes_and_says_why_when_github_cannot_answer(client, github_signin, suggested_issue):
    sign_in_with_github(client, github_signin, "demo-triager")
    github_signin.inject("error", path=r"^/orgs/", status=502, times=200)
    _time_passes(client, "demo-triager")

    page = client.get("/")  # reads go on, on the role GitHub last confirmed, with a word on the page
    assert page.status_code == 200 and b"GitHub could not confirm your role" in page.content
    assert roles_of("demo-triager") == {"triager"}
    _apply(client, suggested_issue)

    decision = TriageDecision.objects.get()
    assert decision.status == TriageDecision.Status.REFUSED
    assert "GitHub could not confirm just now" in decision.result_message
    assert not github_signin.label_events


def test_it_leaves_local_accounts_alone(client, triager, github_signin, suggested_issue, settings):
    settings.GITHUB_WRITE_AS = "app"  # a local account has no GitHub token to write as
    client.force_login(triager)
    client.get("/")
    _apply(client, suggested_issue)
    assert not github_signin.requests_to(r"^/orgs/")
    assert set(triager.groups.values_list("name", flat=True)) == {"triager"}
    assert TriageDecision.objects.get().status == TriageDecision.Status.PENDING


# --- mid-session, on the worker, in both write modes ----------------------------------------------------------------


def _worker(mode: str, fake, tmp_path_factory, django_db_blocker):
    with django_db_blocker.unblock():
        db_name = connection.settings_dict["NAME"]
    queue = f"github-identity-{mode}-test"
    env = {
        **os.environ,
        "DATABASE_URL": child_database_url(db_name),
        "PYTHONUNBUFFERED": "1",
        "GITHUB_API_URL": fake.url,
        "GITHUB_URL": fake.url,
        "GITHUB_TOKEN": TOKEN,
        "GITHUB_REPO": fake.repo,
        "GITHUB_OAUTH_CLIENT_ID": "dashboard-test-client",
        "GITHUB_OAUTH_CLIENT_SECRET": "dashboard-test-client-secret-not-a-secret",
        "GITHUB_WRITE_AS": mode,
        "GITHUB_WRITE_INTERVAL": "0.05",
        "TRIAGE_ORG": DEMO_ORG,
    }
    log = open(tmp_path_factory.mktemp("worker") / "worker.log", "w")
    return queue, running_worker(f"identity-{mode}-{os.getpid()}@{socket.gethostname()}", queue, env=env, log=log)


@pytest.fixture(scope="module", params=["user", "app"])
def identity_worker(request, django_db_setup, django_db_blocker, fake_github_server, tmp_path_factory):
    """A real worker with sign-in configured, writing as the user or as the site; yields (mode, its queue)."""
    queue, worker = _worker(request.param, fake_github_server, tmp_path_factory, django_db_blocker)
    with worker:
        yield request.param, queue


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("removed_from", ["team", "org"])
def test_it_writes_nothing_for_a_triager_removed_mid_session_on_the_worker(
    client, github_signin, suggested_issue, identity_worker, removed_from
):
    """The attack: removed from the team, then from the org, a triager's decisions kept being written (as the site
    with GITHUB_WRITE_AS=app). Now the worker asks GitHub again when its last answer is over a minute old."""
    mode, queue = identity_worker
    sign_in_with_github(client, github_signin, "demo-triager")
    user = _user("demo-triager")

    def decide(label: str) -> TriageDecision:
        decision = TriageDecision.objects.create(
            issue=suggested_issue, user=user, labels_seen=sorted(github_signin.labels_of(3501)), labels_added=[label]
        )
        apply_decision_task.apply_async((decision.pk,), queue=queue)
        return wait_until_finished(decision, timeout=60)

    first = decide("module: inductor")
    assert first.status == TriageDecision.Status.APPLIED, first.result_message
    actor = "demo-triager" if mode == "user" else DASHBOARD_LOGIN
    assert [e["actor"] for e in github_signin.label_events] == [actor]

    if removed_from == "team":
        github_signin.remove_from_team("demo-triager", DEMO_ORG, "pt2-triagers")
    else:
        github_signin.remove_from_org("demo-triager", DEMO_ORG)
    _time_passes(client, "demo-triager", session=False, answer=identity.WRITE_TRUST + timedelta(seconds=1))
    make_label("module: dynamo")
    github_signin.add_label("module: dynamo")

    second = decide("module: dynamo")

    assert second.status == TriageDecision.Status.FAILED, second.result_message
    assert second.result_message.startswith("Not written to GitHub")
    expected = "viewer role" if removed_from == "team" else f"no longer a member of {DEMO_ORG}"
    assert expected in second.result_message
    assert len(github_signin.label_events) == 1  # nothing more was written
    assert GitHubWrite.objects.filter(decision=second, action="role_check", ok=False).exists()
    assert roles_of("demo-triager") == ({"viewer"} if removed_from == "team" else set())


# --- passwords, allauth's pages, the sign-up form, the session ---------------------------------------------------


def test_it_never_signs_a_github_user_in_with_a_password(client, github_signin):
    sign_in_with_github(client, github_signin, "demo-triager")
    user = _user("demo-triager")
    user.set_password("pw-set-before-the-fix-9f8e")  # as /accounts/password/set/ allowed
    user.save()
    other = client.__class__()

    login = other.post("/accounts/login/", {"username": user.username, "password": "pw-set-before-the-fix-9f8e"})
    admin = other.post("/admin/login/", {"username": user.username, "password": "pw-set-before-the-fix-9f8e"})

    assert login.status_code == 200 and admin.status_code == 200  # the forms again, with an error
    assert "_auth_user_id" not in other.session


def test_it_keeps_the_demo_accounts_password_sign_in(client, github_signin):
    local = make_user("triager", "triager")  # as `make run` makes them: triager/triager
    local.set_password("triager")
    local.save()
    response = client.post("/accounts/login/", {"username": "triager", "password": "triager"})
    assert response.status_code == 302 and client.get("/").status_code == 200


ALLAUTH_PAGES_GONE = [
    "/accounts/password/set/",
    "/accounts/password/change/",
    "/accounts/password/reset/",
    "/accounts/password/reset/done/",
    "/accounts/signup/",
    "/accounts/email/",
    "/accounts/3rdparty/",
    "/accounts/3rdparty/signup/",
    "/accounts/reauthenticate/",
    "/accounts/login/code/",
]


@pytest.mark.parametrize("path", ALLAUTH_PAGES_GONE)
def test_it_mounts_none_of_allauths_password_email_or_sign_up_pages(client, github_signin, path):
    assert client.get(path).status_code == 404
    assert client.post(path, {"email": "someone@example.org", "password1": "x", "password2": "x"}).status_code == 404


@pytest.mark.parametrize(
    "path",
    [
        "/accounts/login/",
        "/accounts/logout/",
        "/accounts/github/login/",
        "/accounts/github/login/callback/",
        "/accounts/github/login/callback/?error=access_denied",
        "/accounts/3rdparty/login/cancelled/",
    ],
)
def test_it_answers_every_sign_in_page_that_stays_mounted_without_a_500(path, github_signin):
    from django.test import Client

    anonymous = Client(raise_request_exception=False)
    for method in (anonymous.get, anonymous.post):
        assert method(path).status_code < 500, (method, path)


def test_it_makes_the_account_from_github_and_never_shows_the_sign_up_form(client, github_signin):
    """The attack: a GitHub user whose profile e-mail matched a local account landed on allauth's sign-up form,
    picked any username and e-mail, and had their token pending in the session meanwhile."""
    local = make_user("someone-local", "viewer")
    local.email = "shared@example.org"
    local.save()
    make_user("demo-member", None)  # a local account already has the GitHub login as its username
    github_signin.users["demo-member"]["email"] = "shared@example.org"

    response = sign_in_with_github(client, github_signin, "demo-member")

    assert response.status_code == 302 and response["Location"] == "/"
    assert "3rdparty/signup" not in response["Location"]
    user = _user("demo-member")
    assert user.email == "" and user.username == "demo-member@github"  # the local account keeps its name
    assert roles_of("demo-member") == {"viewer"} and not user.has_usable_password()
    assert "socialaccount_sociallogin" not in client.session


def test_it_keeps_no_token_in_the_session_at_any_step(client, github_signin):
    start = client.post("/accounts/github/login/")
    authorize = urlsplit(start["Location"])
    asked = {k: v[-1] for k, v in parse_qs(authorize.query).items()}
    picked = requests.post(
        f"{github_signin.url}/login/oauth/authorize", data={**asked, "login": "demo-triager"}, allow_redirects=False
    )
    back = urlsplit(picked.headers["Location"])
    during = dict(client.session)
    client.get(f"{back.path}?{back.query}")
    after = dict(client.session)
    tokens = [*github_signin.tokens]
    assert tokens and not SocialToken.objects.exists()
    for stored in (during, after):
        assert not any(token in json.dumps(stored, default=str) for token in tokens)
