"""Writes as the triager: people's GitHub tokens encrypted at rest, refreshed once before they expire,
refused ones failing the decision with the reason, and the site's GitHub App token cached.

PyGithub talks over HTTP to the fake GitHub (rubric_app/demo/github_server.py), which knows each token's
owner and records the actor of every label event, as GitHub's timeline shows it.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from rubric_app.bisection.sandbox import scrubbed_env
from rubric_app.github import client as github
from rubric_app.github import connect, credentials
from rubric_app.github.applying import apply_decision
from rubric_app.models import GitHubCredential, TriageDecision
from rubric_app.triage.decisions import Plan, request_decision
from tests.factories import make_issue, make_label
from tests.fakegithub import TOKEN

pytestmark = pytest.mark.django_db
Status = TriageDecision.Status
REFRESH_PATH = "/login/oauth/access_token"


@pytest.fixture
def signed_in(fake_github, settings):
    """Sign-in configured (so writes go as the user), GitHub's web root on the fake, issue #1001 on both."""
    settings.GITHUB_WRITE_INTERVAL = 0.01
    settings.GITHUB_URL = fake_github.url
    settings.GITHUB_OAUTH_CLIENT_ID = "test-client-id"
    settings.GITHUB_OAUTH_CLIENT_SECRET = "test-client-secret"
    settings.GITHUB_WRITE_AS = ""  # unset: "user", since sign-in is configured
    for name in ("module: inductor", "module: dynamo", "triaged"):
        make_label(name, github=fake_github)
    fake_github.add_issue(1001, labels=["oncall: pt2"])
    return make_issue(1001, labels=("oncall: pt2",))


def _decide(issue, user, add=("module: inductor",)) -> TriageDecision:
    issue.refresh_from_db()
    return request_decision(issue=issue, user=user, plan=Plan(list(add), []), labels_seen=issue.label_names())


def _sign_in(user, fake, **token_options) -> str:
    access, refresh = fake.issue_user_token(user.username, **token_options)
    expires_in = token_options.get("expires_in")
    credentials.save_user_token(
        user,
        access_token=access,
        refresh_token=refresh or None,
        expires_at=timezone.now() + timedelta(seconds=expires_in) if expires_in is not None else None,
        scopes="read:org,public_repo",
    )
    return access


def test_it_stores_the_token_encrypted(triager, settings):
    credentials.save_user_token(
        triager, access_token="gho_SECRETACCESS", refresh_token="ghr_SECRETREFRESH", expires_at=None, scopes="x"
    )

    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM rubric_app_githubcredential")
        row = " ".join(str(value) for value in cursor.fetchone())
    assert "SECRETACCESS" not in row and "SECRETREFRESH" not in row
    assert credentials.token_for(triager) == "gho_SECRETACCESS"

    settings.TOKEN_ENCRYPTION_KEYS = ["bm90LXRoZS1rZXktdGhhdC1lbmNyeXB0ZWQtaXQxMjM="]  # a key that did not encrypt it
    with pytest.raises(credentials.CredentialError, match="sign in to GitHub again"):
        credentials.token_for(triager)


def test_it_writes_with_the_triagers_token_and_github_names_them(signed_in, triager, fake_github, caplog):
    access = _sign_in(triager, fake_github)
    decision = _decide(signed_in, triager)

    with caplog.at_level(logging.DEBUG):
        decision = apply_decision(decision.pk)

    assert decision.status == Status.APPLIED, decision.result_message
    assert fake_github.label_events == [
        {"issue": 1001, "event": "labeled", "label": "module: inductor", "actor": "tina-triager"}
    ]
    writes = [r for r in fake_github.requests if r.method != "GET"]
    assert {r.headers["authorization"] for r in writes} == {f"token {access}"}  # never the site's token
    cred = GitHubCredential.objects.get(user=triager)
    assert cred.rate_limit_remaining == fake_github.user_rate_limits["tina-triager"] < 5000
    assert cred.rate_limit_reset_at is not None
    assert access not in caplog.text


def test_it_refreshes_an_expired_token_once(signed_in, triager, fake_github):
    old = _sign_in(triager, fake_github, expires_in=60)  # inside the refresh margin

    first = apply_decision(_decide(signed_in, triager).pk)
    second = apply_decision(_decide(signed_in, triager, add=("module: dynamo",)).pk)

    assert (first.status, second.status) == (Status.APPLIED, Status.APPLIED), second.result_message
    refreshes = fake_github.requests_to(REFRESH_PATH, "POST")
    assert len(refreshes) == 1
    assert "client_secret=test-client-secret" in refreshes[0].sent
    fresh = credentials.token_for(triager)
    assert fresh != old and fake_github.user_tokens[fresh]["login"] == "tina-triager"
    assert [e["actor"] for e in fake_github.label_events] == ["tina-triager", "tina-triager"]


def test_it_fails_a_revoked_token_with_the_reason_and_no_other_identity(signed_in, triager, fake_github):
    fake_github.revoke(_sign_in(triager, fake_github))

    decision = apply_decision(_decide(signed_in, triager).pk)

    assert decision.status == Status.FAILED
    assert "sign in to GitHub again" in decision.result_message
    assert fake_github.label_events == [] and [r for r in fake_github.requests if r.method != "GET"] == []
    assert GitHubCredential.objects.get(user=triager).revoked_at is not None
    # and the next decision fails at once, before asking GitHub
    asked = len(fake_github.requests)
    again = apply_decision(_decide(signed_in, triager).pk)
    assert "sign in to GitHub again" in again.result_message and len(fake_github.requests) == asked


def test_it_fails_an_expired_token_that_cannot_be_refreshed(signed_in, triager, fake_github):
    _sign_in(triager, fake_github, expires_in=-10, refresh=False)

    decision = apply_decision(_decide(signed_in, triager).pk)

    assert decision.status == Status.FAILED
    assert "expired: sign in to GitHub again" in decision.result_message


def test_it_fails_a_refused_refresh_token(signed_in, triager, fake_github):
    access = _sign_in(triager, fake_github, expires_in=-10)
    fake_github.revoke(access)  # revoking drops the refresh token too

    decision = apply_decision(_decide(signed_in, triager).pk)

    assert decision.status == Status.FAILED and "sign in to GitHub again" in decision.result_message
    assert len(fake_github.requests_to(REFRESH_PATH, "POST")) == 1
    assert GitHubCredential.objects.get(user=triager).revoked_at is not None


def test_it_asks_a_local_account_to_sign_in_with_github(signed_in, triager, fake_github):
    requested = _decide(signed_in, triager)  # refused when asked: nothing is queued

    assert requested.status == Status.REFUSED
    assert "has no GitHub token: sign in with GitHub" in requested.result_message
    # and a decision that reached the worker anyway (queued before sign-in was turned on) fails the same way
    queued = TriageDecision.objects.create(
        issue=signed_in, user=triager, labels_seen=["oncall: pt2"], labels_added=["module: inductor"]
    )
    failed = apply_decision(queued.pk)
    assert failed.status == Status.FAILED and "sign in with GitHub" in failed.result_message
    assert fake_github.requests == []  # nothing asked of GitHub under another identity


def test_it_writes_as_the_site_when_sign_in_is_not_configured(signed_in, triager, fake_github, settings):
    settings.GITHUB_OAUTH_CLIENT_ID = ""

    decision = apply_decision(_decide(signed_in, triager).pk)

    assert decision.status == Status.APPLIED, decision.result_message
    assert [e["actor"] for e in fake_github.label_events] == ["pt2-triage-dashboard"]


def test_it_says_when_the_triager_lacks_triage_permission(signed_in, triager, fake_github):
    _sign_in(triager, fake_github)
    fake_github.triagers = {"someone-else"}

    decision = apply_decision(_decide(signed_in, triager).pk)

    assert decision.status == Status.FAILED
    assert "lacks triage permission on pytorch/pytorch" in decision.result_message
    assert fake_github.label_events == []


@pytest.fixture
def github_app(fake_github, settings):
    """A GitHub App installed on the fake's repo, with a key made for this test; the site token unset."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public_pem = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    fake_github.install_app("12345", public_pem)
    settings.GITHUB_TOKEN = ""
    settings.GITHUB_APP_ID = "12345"
    settings.GITHUB_APP_PRIVATE_KEY = private_pem
    github._installation.clear()
    yield fake_github
    github._installation.clear()


def test_it_writes_with_the_app_installation_token_and_audits_the_triager(signed_in, triager, github_app, settings):
    settings.GITHUB_WRITE_AS = "app"

    decisions = [
        apply_decision(_decide(signed_in, triager, add=(name,)).pk)
        for name in ("module: inductor", "module: dynamo", "triaged")
    ]

    assert [d.status for d in decisions] == [Status.APPLIED] * 3, decisions[-1].result_message
    assert [d.user for d in decisions] == [triager] * 3  # the audit names the triager
    assert {e["actor"] for e in github_app.label_events} == {"pt2-triage[bot]"}
    # one installation lookup and one token for all three decisions (cached until shortly before expiry)
    assert len(github_app.requests_to(r"/app/installations/\d+/access_tokens", "POST")) == 1
    assert len(github_app.requests_to(r"/repos/pytorch/pytorch/installation", "GET")) == 1
    writes = [r for r in github_app.requests if r.method != "GET" and "/issues/" in r.path]
    assert all(r.headers["authorization"].startswith("token ghs_installation_") for r in writes)


def test_it_asks_for_a_new_installation_token_shortly_before_expiry(signed_in, triager, github_app, settings):
    settings.GITHUB_WRITE_AS = "app"
    connect.client()
    for cached in github._installation.values():
        cached["expires_at"] = cached["expires_at"] - 3600 + github.INSTALLATION_TOKEN_MARGIN - 1

    connect.client()

    assert len(github_app.requests_to(r"/app/installations/\d+/access_tokens", "POST")) == 2
    assert len(github_app.requests_to(r"/repos/pytorch/pytorch/installation", "GET")) == 1


def test_it_never_shows_the_token_on_a_page_or_in_a_repro_environment(signed_in, triager, fake_github, client):
    access = _sign_in(triager, fake_github)
    apply_decision(_decide(signed_in, triager).pk)
    client.force_login(triager)

    for url in (reverse("rubric_app:issue", args=[1001]), reverse("rubric_app:queue"), reverse("rubric_app:audit")):
        page = client.get(url)
        assert page.status_code == 200 and access not in page.content.decode(), url
    host_env = {"PATH": "/usr/bin", "GITHUB_TOKEN": access, "TOKEN_ENCRYPTION_KEY": "k", "GITHUB_APP_PRIVATE_KEY": "p"}
    env = scrubbed_env("/tmp/repro", host_env)
    assert not {"GITHUB_TOKEN", "TOKEN_ENCRYPTION_KEY", "GITHUB_APP_PRIVATE_KEY"} & set(env)
    assert access not in " ".join(env.values())


def test_it_lets_the_demo_accounts_write_as_the_dashboard_on_the_demo_github(signed_in, triager, fake_github, settings):
    settings.GITHUB_TOKEN = ""  # `make run`'s demo mode: the demo GitHub on this machine, sign-in offered
    fake_github.token = None
    try:
        decision = apply_decision(_decide(signed_in, triager).pk)
    finally:
        fake_github.token = TOKEN

    assert decision.status == Status.APPLIED, decision.result_message
    assert [e["actor"] for e in fake_github.label_events] == ["pt2-triage-dashboard"]


def test_it_waits_for_a_triagers_spent_rate_limit_without_asking_github(signed_in, triager, fake_github):
    _sign_in(triager, fake_github)
    GitHubCredential.objects.filter(user=triager).update(
        rate_limit_remaining=0, rate_limit_reset_at=timezone.now() + timedelta(hours=1)
    )

    decision = apply_decision(_decide(signed_in, triager).pk)

    assert decision.status == Status.FAILED
    assert "rate limit is spent until" in decision.result_message
    assert fake_github.requests == []


def test_it_writes_as_whoever_signed_in_with_github(client, github_signin):
    """The whole flow over HTTP: sign in on the fake GitHub (allauth), then a decision by that person."""
    from django.contrib.auth.models import User

    from tests.github.test_signin import sign_in_with_github

    assert sign_in_with_github(client, github_signin, "demo-triager").status_code == 302
    user = User.objects.get(socialaccount__extra_data__login="demo-triager")
    token = next(t for t, login in github_signin.tokens.items() if login == "demo-triager")
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM rubric_app_githubcredential")
        assert token not in " ".join(str(value) for value in cursor.fetchone())
    make_label("module: inductor", github=github_signin)
    github_signin.add_issue(1001, labels=["oncall: pt2"])
    issue = make_issue(1001, labels=("oncall: pt2",))

    decision = apply_decision(_decide(issue, user).pk)

    assert decision.status == Status.APPLIED, decision.result_message
    assert [e["actor"] for e in github_signin.label_events] == ["demo-triager"]
    cred = GitHubCredential.objects.get(user=user)
    assert (cred.login, cred.scopes) == ("demo-triager", "read:org,public_repo")
    assert cred.rate_limit_remaining == github_signin.user_rate_limits["demo-triager"] < 5000
    for url in (reverse("rubric_app:issue", args=[1001]), reverse("rubric_app:audit")):
        page = client.get(url)
        assert page.status_code == 200 and token not in page.content.decode(), url


def test_it_says_when_github_refuses_the_apps_key(signed_in, triager, github_app, settings):
    settings.GITHUB_WRITE_AS = "app"
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    settings.GITHUB_APP_PRIVATE_KEY = other.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()

    decision = apply_decision(_decide(signed_in, triager).pk)

    assert decision.status == Status.FAILED
    assert "the GitHub App could not get an installation token (401)" in decision.result_message
    assert github_app.label_events == []
