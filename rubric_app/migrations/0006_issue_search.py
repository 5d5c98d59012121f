"""Full-text search of issues: PostgreSQL's tsvector column or SQLite's FTS5 table, with triggers.

Raw SQL on one vendor each (see rubric_app/search_index.py); no model state changes, so the
column and the virtual table stay invisible to the ORM.
"""

from django.db import migrations

from rubric_app import search_index


class RunSQLOn(migrations.RunSQL):
    """RunSQL for one database vendor; a no-op on the others."""

    def __init__(self, vendor: str, *args, **kwargs):
        self.vendor = vendor
        super().__init__(*args, **kwargs)

    def deconstruct(self):
        name, args, kwargs = super().deconstruct()
        return name, [self.vendor, *args], kwargs

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == self.vendor:
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == self.vendor:
            super().database_backwards(app_label, schema_editor, from_state, to_state)


class Migration(migrations.Migration):

    dependencies = [("rubric_app", "0005_stuck_work")]

    operations = [
        RunSQLOn("postgresql", search_index.POSTGRES_FORWARD, search_index.POSTGRES_REVERSE),
        RunSQLOn("sqlite", search_index.SQLITE_FORWARD, search_index.SQLITE_REVERSE),
    ]
