"""The full-text index behind IssueQuerySet.search, one per database vendor.

PostgreSQL: a `search_vector` tsvector column on rubric_app_issue (title weight A, body B,
comments C; English stemming), GIN-indexed. SQLite (the embedded default): an FTS5 table
`rubric_app_issue_fts` (number, title, body, comments; porter stemmer), its rowid the issue's id;
the number is indexed so that a search for it finds the issue within the one join.

Database triggers keep both current, so every write path (the sync's bulk upserts, webhooks,
the demo loader, the admin, `update()`) is covered without code in each. The column and the
table are not model fields: Django never reads or writes them, only the search does.

SQLite drops a table's triggers when Django remakes the table (an AddField with a default,
any AlterField), so `ensure_sqlite_triggers` re-creates missing ones after every migrate and
then rebuilds the FTS table, which may have missed writes.
"""

from __future__ import annotations

from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVectorField
from django.db import connections
from django.db.models import FloatField
from django.db.models.expressions import RawSQL

from rubric_app.search import Clause

ISSUE = "rubric_app_issue"
COMMENT = "rubric_app_comment"
FTS = "rubric_app_issue_fts"
# bm25 weights of the FTS5 columns (number, title, body, comments): a title match outranks a body match.
FTS_WEIGHTS = "10.0, 10.0, 3.0, 1.0"

# --- PostgreSQL ----------------------------------------------------------------------------------

POSTGRES_FORWARD = [
    f"ALTER TABLE {ISSUE} ADD COLUMN search_vector tsvector",
    f"""CREATE FUNCTION {ISSUE}_search_vector(p_id bigint, p_title text, p_body text) RETURNS tsvector
        LANGUAGE sql STABLE AS $$
          SELECT setweight(to_tsvector('english'::regconfig, coalesce(p_title, '')), 'A')
              || setweight(to_tsvector('english'::regconfig, coalesce(p_body, '')), 'B')
              || setweight(to_tsvector('english'::regconfig, coalesce(
                   (SELECT string_agg(c.body, E'\\n' ORDER BY c.id) FROM {COMMENT} c"""
    f""" WHERE c.issue_id = p_id), '')), 'C')
        $$""",
    # Row-level on the issue: recompute only when the title or the body changed.
    f"""CREATE FUNCTION {ISSUE}_search_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF TG_OP = 'INSERT' OR NEW.title IS DISTINCT FROM OLD.title OR NEW.body IS DISTINCT FROM OLD.body THEN
            NEW.search_vector := {ISSUE}_search_vector(NEW.id, NEW.title, NEW.body);
          END IF;
          RETURN NEW;
        END $$""",
    f"""CREATE TRIGGER {ISSUE}_search BEFORE INSERT OR UPDATE ON {ISSUE}
        FOR EACH ROW EXECUTE FUNCTION {ISSUE}_search_trigger()""",
    # Statement-level on comments: the sync upserts hundreds at once; each issue is redone once.
    f"""CREATE FUNCTION {COMMENT}_search_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF TG_OP = 'INSERT' THEN
            UPDATE {ISSUE} i SET search_vector = {ISSUE}_search_vector(i.id, i.title, i.body)
             WHERE i.id IN (SELECT issue_id FROM new_rows);
          ELSIF TG_OP = 'DELETE' THEN
            UPDATE {ISSUE} i SET search_vector = {ISSUE}_search_vector(i.id, i.title, i.body)
             WHERE i.id IN (SELECT issue_id FROM old_rows);
          ELSE
            UPDATE {ISSUE} i SET search_vector = {ISSUE}_search_vector(i.id, i.title, i.body)
             WHERE i.id IN (SELECT issue_id FROM new_rows UNION SELECT issue_id FROM old_rows);
          END IF;
          RETURN NULL;
        END $$""",
    # PostgreSQL allows transition tables only on single-event triggers: one trigger per event.
    f"""CREATE TRIGGER {COMMENT}_search_ins AFTER INSERT ON {COMMENT} REFERENCING NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION {COMMENT}_search_trigger()""",
    f"CREATE TRIGGER {COMMENT}_search_upd AFTER UPDATE ON {COMMENT} "
    f"""REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION {COMMENT}_search_trigger()""",
    f"""CREATE TRIGGER {COMMENT}_search_del AFTER DELETE ON {COMMENT} REFERENCING OLD TABLE AS old_rows
        FOR EACH STATEMENT EXECUTE FUNCTION {COMMENT}_search_trigger()""",
    f"UPDATE {ISSUE} SET search_vector = {ISSUE}_search_vector(id, title, body)",
    f"CREATE INDEX {ISSUE}_search_idx ON {ISSUE} USING gin (search_vector)",
]

POSTGRES_REVERSE = [
    f"DROP TRIGGER {COMMENT}_search_ins ON {COMMENT}",
    f"DROP TRIGGER {COMMENT}_search_upd ON {COMMENT}",
    f"DROP TRIGGER {COMMENT}_search_del ON {COMMENT}",
    f"DROP FUNCTION {COMMENT}_search_trigger()",
    f"DROP TRIGGER {ISSUE}_search ON {ISSUE}",
    f"DROP FUNCTION {ISSUE}_search_trigger()",
    f"DROP FUNCTION {ISSUE}_search_vector(bigint, text, text)",
    f"DROP INDEX {ISSUE}_search_idx",
    f"ALTER TABLE {ISSUE} DROP COLUMN search_vector",
]

# --- SQLite FTS5 -----------------------------------------------------------------------------


def _comments_of(issue_id: str) -> str:
    """Statements (inside a comment trigger) that refresh one issue's comments column."""
    return (
        f"UPDATE {FTS} SET comments = (SELECT group_concat(c.body, char(10)) FROM {COMMENT} c "
        f"WHERE c.issue_id = {issue_id}) WHERE rowid = {issue_id};"
    )


# Each table's triggers name only that table and the FTS table: SQLite refuses to rename a
# remade table (Django's AlterField, AddField with a default) while another table's trigger
# names the one just dropped, so an issue trigger naming the comment table would break migrate.
SQLITE_TRIGGERS = {
    f"{ISSUE}_fts_ai": f"AFTER INSERT ON {ISSUE} BEGIN "
    f"INSERT INTO {FTS}(rowid, number, title, body, comments) "
    f"VALUES (new.id, new.number, new.title, new.body, ''); END",
    f"{ISSUE}_fts_au": f"AFTER UPDATE OF title, body ON {ISSUE} BEGIN "
    f"UPDATE {FTS} SET title = new.title, body = new.body WHERE rowid = new.id; END",
    f"{ISSUE}_fts_ad": f"AFTER DELETE ON {ISSUE} BEGIN DELETE FROM {FTS} WHERE rowid = old.id; END",
    f"{COMMENT}_fts_ai": f"AFTER INSERT ON {COMMENT} BEGIN {_comments_of('new.issue_id')} END",
    f"{COMMENT}_fts_au": f"AFTER UPDATE OF body, issue_id ON {COMMENT} BEGIN "
    f"{_comments_of('old.issue_id')} {_comments_of('new.issue_id')} END",
    f"{COMMENT}_fts_ad": f"AFTER DELETE ON {COMMENT} BEGIN {_comments_of('old.issue_id')} END",
}

SQLITE_REBUILD = [
    f"DELETE FROM {FTS}",
    f"INSERT INTO {FTS}(rowid, number, title, body, comments) "
    "SELECT i.id, i.number, i.title, i.body, "
    f"(SELECT group_concat(c.body, char(10)) FROM {COMMENT} c WHERE c.issue_id = i.id) "
    f"FROM {ISSUE} i",
]

SQLITE_FORWARD = [
    f"CREATE VIRTUAL TABLE {FTS} USING fts5(number, title, body, comments, "
    "tokenize = 'porter unicode61 remove_diacritics 2')",
    *(f"CREATE TRIGGER {name} {body}" for name, body in SQLITE_TRIGGERS.items()),
    *SQLITE_REBUILD,
]

SQLITE_REVERSE = [*(f"DROP TRIGGER {name}" for name in SQLITE_TRIGGERS), f"DROP TABLE {FTS}"]


def ensure_sqlite_triggers(using: str = "default", **kwargs) -> bool:
    """Re-create the FTS5 triggers a table remake dropped, then rebuild the index; True if it had to.

    Connected to post_migrate: a migration that remakes rubric_app_issue or rubric_app_comment on
    SQLite drops their triggers, and the index would silently stop following the issues.
    """
    connection = connections[using]
    if connection.vendor != "sqlite":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger')")
        present = {row[0] for row in cursor.fetchall()}
        if FTS not in present or set(SQLITE_TRIGGERS) <= present:
            return False  # not migrated this far yet, or nothing lost
        for name, body in SQLITE_TRIGGERS.items():
            if name not in present:
                cursor.execute(f"CREATE TRIGGER {name} {body}")
        for statement in SQLITE_REBUILD:
            cursor.execute(statement)
    return True


# --- the search, per vendor ------------------------------------------------------------------


def postgres_match(clauses: list[Clause]) -> tuple[RawSQL, SearchQuery]:
    """(the stored vector, the query): all positive clauses, each any of its phrases, and none of the negated.

    Each phrase goes through websearch_to_tsquery, which accepts any text; quoting makes a
    several-word phrase adjacent words, as FTS5 reads it.
    """
    vector = RawSQL(f'"{ISSUE}"."search_vector"', [], output_field=SearchVectorField())
    query = None
    for clause in clauses:
        atoms = [SearchQuery(f'"{p}"', search_type="websearch", config="english") for p in clause.phrases]
        if clause.negated:
            part = ~atoms[0]
            for atom in atoms[1:]:
                part &= ~atom
        else:
            part = atoms[0]
            for atom in atoms[1:]:
                part |= atom
        query = part if query is None else query & part
    return vector, query


def postgres_rank(vector: RawSQL, query: SearchQuery) -> SearchRank:
    return SearchRank(vector, query)  # default weights: title (A) 1.0, body (B) 0.4, comments (C) 0.2


def sqlite_search(qs, match: str, numbers_too: bool):
    """(qs joined to the FTS5 rows `match` selects, their BM25 score: higher is better).

    The number column is searched only for a search by number ("error 500" is not #500).

    A join, not a correlated subquery: FTS5 then evaluates the expression once, not once per
    issue (a 5,000-issue queue took seconds). The `+` keeps SQLite from offering FTS5 the rowid
    equality, which made it pick that same per-issue plan for the lanes' label joins. Django has
    no join to a table without a model, hence extra().
    """
    if not numbers_too:
        match = f"{{title body comments}} : ({match})"
    joined = qs.extra(tables=[FTS], where=[f'+{FTS}.rowid = "{ISSUE}"."id"', f"{FTS} MATCH %s"], params=[match])
    return joined, RawSQL(f"-bm25({FTS}, {FTS_WEIGHTS})", [], output_field=FloatField())
