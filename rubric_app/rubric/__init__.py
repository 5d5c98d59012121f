"""The PT2 triage rubric (../RUBRIC.md in the product docs) as pure Python, in wings that import only their own or
lower ones: reading/ (the issue as text, thread and facts; the engine's input and output; the label catalog) <
likeness/ (failure signatures, term vectors, possible duplicates) < rules/ (RUBRIC.md as code, one function per rule
id) < engine/ (weighing the findings into an Assessment, the learned labeler) < offline/ (training, evaluating and
promoting a labeler: commands, never a page).

No Django imports here: the engine (engine/assess.py evaluate) takes plain data (reading/types.py IssueText) and
returns an Assessment. The Django side (rubric_app/triage/suggestions.py) maps rows to and from it. This package
imports nothing: importing one wing's module never loads the engine.
"""
