from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from rubric_app.github import signin

urlpatterns = [
    path("admin/", admin.site.urls),
    # Local accounts (the demo's, an operator's break-glass superuser); the page offers GitHub when configured.
    path("accounts/login/", signin.login_view, name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Sign in with GitHub: allauth's views with addresses read from settings (rubric_app/github/signin.py),
    # at the paths allauth's own GitHub provider uses, so its reverse() names them too.
    path("accounts/github/login/", signin.oauth2_login, name="github_signin"),
    path("accounts/github/login/callback/", signin.oauth2_callback, name="github_signin_callback"),
    path("accounts/", include("allauth.urls")),
    path("", include("rubric_app.urls")),
]
