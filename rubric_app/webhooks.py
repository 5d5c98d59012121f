"""POST /github/webhook (the GitHub issue implements it)."""

from django.http import HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST


@csrf_exempt
@require_POST
def github_webhook(request):
    return HttpResponse(status=501)
