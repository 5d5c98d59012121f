"""The runners page (/runners): the registered bisection runners, what each serves and runs, the lanes' waiting runs;
and, for an operator (manage_runners), registering a runner (its secret shown once), a new secret, and revoking."""

from __future__ import annotations

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from rubric_app import dispatch
from rubric_app.models import Runner
from rubric_app.runs import board, registration
from rubric_app.web.views.access import partial_template, require


class RegisterRunnerForm(forms.Form):
    name = forms.CharField(max_length=40, help_text="lowercase letters, digits and dashes: its queues are named so")
    device = forms.ChoiceField(choices=Runner.Device.choices, initial=Runner.Device.CPU)


def _page(request: HttpRequest, *, form=None, issued=None, status: int = 200) -> HttpResponse:
    context = {"board": board.board(), "form": form or RegisterRunnerForm(), "issued": issued}
    template = partial_template(request, "rubric_app/runners.html", "runners-board")
    if issued is not None or form is not None:
        template = "rubric_app/runners.html"  # a registration's answer: the whole page, the secret on it
    return render(request, template, context, status=status)


@login_required
@require_GET
def runners_page(request: HttpRequest) -> HttpResponse:
    require(request, "view_bisectionrun")
    return _page(request)


@never_cache  # the answer holds a secret: no cache may keep it
@login_required
@require_POST
def runner_register(request: HttpRequest) -> HttpResponse:
    require(request, "manage_runners")
    form = RegisterRunnerForm(request.POST)
    if not form.is_valid():
        return _page(request, form=form, status=400)
    try:
        issued = registration.register(by=request.user.get_username(), **form.cleaned_data)
    except registration.Refused as exc:
        form.add_error("name", str(exc))
        return _page(request, form=form, status=400)
    dispatch.start_provisioning(issued.runner.pk)
    return _page(request, issued=issued)


@never_cache
@login_required
@require_POST
def runner_rotate(request: HttpRequest, pk: int) -> HttpResponse:
    require(request, "manage_runners")
    runner = get_object_or_404(Runner.objects.active(), pk=pk)
    issued = registration.rotate(runner, by=request.user.get_username())
    dispatch.start_provisioning(runner.pk)
    return _page(request, issued=issued)


@login_required
@require_POST
def runner_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    require(request, "manage_runners")
    runner = get_object_or_404(Runner, pk=pk)
    registration.revoke(runner, by=request.user.get_username(), note=request.POST.get("note", ""))
    return redirect("rubric_app:runners")
