from django.contrib.auth.decorators import login_required, permission_required
from django.core.paginator import Paginator
from django.shortcuts import render

from .models import Issue


@login_required
@permission_required("rubric_app.view_issue", raise_exception=True)
def queue(request):
    lane = request.GET.get("lane", "pt2")
    page = Paginator(Issue.objects.for_queue(lane), 50).get_page(request.GET.get("page"))
    return render(request, "rubric_app/queue.html", {"page": page, "lane": lane})
