import pytest
from django.core.management import call_command

from rubric_app.demo.loading import load_catalog_labels
from rubric_app.models import Comment, Issue, Label

pytestmark = pytest.mark.django_db


def test_it_loads_the_catalog_with_g7_labels_not_allowed():
    count = load_catalog_labels()
    assert count == Label.objects.count() > 250
    assert Label.objects.get(name="module: dynamo").allowed_for_triage
    assert Label.objects.get(name="oncall: pt2").description


def test_it_loads_the_demo_issues_idempotently(capsys):
    call_command("load_demo", "--users")
    first = (Issue.objects.count(), Comment.objects.count())
    call_command("load_demo")

    assert (Issue.objects.count(), Comment.objects.count()) == first
    assert first[0] >= 40 and first[1] > 0
    assert Issue.objects.for_queue("pt2").exists()
    assert Issue.objects.for_queue("cpu").exists()
    assert Issue.objects.filter(labels__name="triage review").exists()
    assert "Demo accounts" in capsys.readouterr().out


def test_it_gives_every_demo_issue_suggestions_with_rule_ids():
    call_command("load_demo")
    for issue in Issue.objects.prefetch_related("suggestions"):
        assert issue.suggestions_updated_at is not None
        assert all(s.rule_id for s in issue.suggestions.all())


def test_it_covers_the_rubric_sections_in_the_demo_text():
    call_command("load_demo")
    text = " ".join(Issue.objects.values_list("body", flat=True)).lower()
    for marker in (
        "dynamic=false",
        ".item()",
        "aot_eager",
        "float16",
        "mkldnn",
        "helion",
        "flex_attention",
        "dtensor",
        "fsdp",
        "fuzzer",
        "segmentation fault",
        "detach_()",
    ):
        assert marker in text, marker
