"""The page's checklist after a finished bisection that named no component (issue 51): R2 reads the run whatever it
concluded, never "no backend results yet" (RUBRIC.md R2)."""

from __future__ import annotations

from html import unescape

from django.urls import reverse

from rubric_app.triage.suggestions import refresh_issue
from tests.factories import make_finished_run, make_issue, make_label

WRONG_RESULT = """`torch.compile` gives a different result than eager, no error:

```python
import torch

def f(x):
    return torch.nn.functional.gelu(x) * 2

x = torch.randn(8)
print(torch.compile(f)(x) - f(x))
```
"""
NO_FAILURE = (
    "No failure reproduced on cpu: every mode matched eager. Compared: the outputs of 1 compiled call(s); the inputs' "
    "state after each call. Not compared: gradients (nothing ran backward). Try other inputs, another device, or ask "
    "for a fuller repro."
)


def test_it_reads_a_finished_run_that_found_nothing_in_r2_of_the_checklist(client, viewer):
    """Mei bisected the report; every mode matched eager. The page says so in R2 and what was compared."""
    for name in ("module: inductor", "triage review", "triaged"):
        make_label(name)
    issue = make_issue(2051, title="torch.compile gives a silently wrong result for gelu", body=WRONG_RESULT)
    before = [c for c in refresh_issue(issue).checklist if c.rule_id == "R2"]
    run = make_finished_run(issue, verdict_labels=[])
    run.verdict_summary = NO_FAILURE  # what verdict.decide says of these results (all passed)
    run.save(update_fields=["verdict_summary"])
    issue.refresh_from_db()

    after = [c for c in refresh_issue(issue).checklist if c.rule_id == "R2"]
    client.force_login(viewer)
    html = unescape(client.get(reverse("rubric_app:issue", args=[2051])).content.decode())

    assert any("No backend results yet" in c.text for c in before)  # what the page said before the run
    assert [c.text for c in after if c.text.startswith("The bisection ran")] == [
        f"The bisection ran and named no component: {NO_FAILURE}"
    ]
    assert not any("No backend results yet" in c.text for c in after)
    assert "The bisection ran and named no component: No failure reproduced on cpu" in html
    assert "No backend results yet" not in html
