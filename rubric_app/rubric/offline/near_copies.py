"""Near-duplicate issues, so that a flood of copies counts once where a labeler is trained and judged (promotion.py).

Each issue is read as the set of its words (similarity.words_of on its title and description: the environment report
and URLs cut, digits dropped; not the thread, which others write). Two issues whose sets overlap by NEAR_DUPLICATE
(Jaccard) are copies of one report; by TOPIC, reports of one kind (the gate spreads its held-out slice over those).
Identical sets are grouped first, so 500 copies of one text cost one; other candidates come from MinHash with banding
(BANDS bands of ROWS hashes: a pair overlapping by 0.8 is a candidate in all but 3 of 10,000 cases, by 0.5 in 9 of
10), each checked on the exact sets. Pure Python and deterministic (crc32, fixed salts): the same records, the same
clusters.
"""

from __future__ import annotations

import random
import zlib
from collections import defaultdict
from dataclasses import replace
from typing import Any

from rubric_app.rubric.likeness.neighbours import words_of
from rubric_app.rubric.offline.evaluation import issue_from_record

NEAR_DUPLICATE = 0.8
TOPIC = 0.5
ROWS, BANDS = 2, 8
# A band's bucket can hold every issue that shares a template's words: each member is checked against its first
# PER_BUCKET members only (a pair missed there is usually found through another band).
PER_BUCKET = 20
# Fewer distinct words than this say too little to call two issues copies (identical sets still are).
MIN_WORDS = 5
_PRIME = (1 << 61) - 1
_SALTS = [
    (random.Random(45 + i).randrange(1, _PRIME), random.Random(450 + i).randrange(_PRIME)) for i in range(ROWS * BANDS)
]


def word_set(record: dict[str, Any]) -> frozenset[str]:
    """The words of a record's title and description (issue_from_record: a harvested thread's comments left out)."""
    return frozenset(words_of(replace(issue_from_record(record, use_labels=False), comments=())))


def clusters(sets: list[frozenset[str]], threshold: float) -> list[int]:
    """For each set, the index of its cluster's first member: sets are joined when their Jaccard overlap reaches
    `threshold` (and so are the sets joined to those)."""
    parent = list(range(len(sets)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def join(i: int, j: int) -> None:
        a, b = root(i), root(j)
        if a != b:
            parent[max(a, b)] = min(a, b)

    first: dict[frozenset[str], int] = {}
    for i, words in enumerate(sets):
        join(first.setdefault(words, i), i)
    unique = [i for i, words in enumerate(sets) if first[words] == i and len(words) >= MIN_WORDS]
    buckets: dict[tuple, list[int]] = defaultdict(list)
    for i in unique:
        hashes = [zlib.crc32(word.encode()) for word in sets[i]]
        signature = [min((a * h + b) % _PRIME for h in hashes) for a, b in _SALTS]
        for band in range(BANDS):
            buckets[(band, *signature[band * ROWS : (band + 1) * ROWS])].append(i)
    seen: set[tuple[int, int]] = set()
    for members in buckets.values():
        for position, j in enumerate(members[1:], start=1):
            for i in members[: min(position, PER_BUCKET)]:
                if (i, j) in seen or root(i) == root(j):
                    continue
                seen.add((i, j))
                if len(sets[i] & sets[j]) >= threshold * len(sets[i] | sets[j]):
                    join(i, j)
    return [root(i) for i in range(len(sets))]
