from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from rubric_app.github import signin

urlpatterns = [
    path("admin/", admin.site.urls),
    # Local accounts (the demo's, an operator's break-glass superuser); the page offers GitHub when configured.
    path("accounts/login/", signin.login_view, name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    # The same two pages under the names allauth's own pages link to (its cancelled sign-in page does).
    path("accounts/login/", signin.login_view, name="account_login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="account_logout"),
    # Sign in with GitHub: allauth's views with addresses read from settings (rubric_app/github/signin.py), at the paths
    # and names allauth's own GitHub provider uses (its reverse() finds them), and the page it sends a cancelled
    # sign-in to. Nothing else of allauth is mounted: no password set, change or reset, no e-mail pages, no
    # sign-up form, no account connections; a GitHub user's password is never used (rubric_app/github/auth_backends.py).
    path("accounts/github/login/", signin.oauth2_login, name="github_login"),
    path("accounts/github/login/callback/", signin.oauth2_callback, name="github_callback"),
    path("accounts/3rdparty/login/cancelled/", signin.login_cancelled, name="socialaccount_login_cancelled"),
    path("", include("rubric_app.urls")),
]
