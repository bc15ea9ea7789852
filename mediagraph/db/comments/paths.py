"""Path enumeration for threads: each level adds 5 base62 characters, in byte order.

With the alphabet 0-9A-Za-z compared under the C collation, sorting by path lists a
thread depth-first with children in creation order; every descendant of `p` sorts in
the half-open range (p, p + "{"), "{" being the byte after "z".
"""

from __future__ import annotations

import re

from mediagraph.db.comments import MAX_DEPTH, SEGMENT_LENGTH

ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
BASE = len(ALPHABET)
SEGMENTS_PER_LEVEL = BASE**SEGMENT_LENGTH
FIRST_SEGMENT = ALPHABET[0] * SEGMENT_LENGTH
# The byte right after the alphabet's last character: an exclusive upper bound for descendants.
AFTER_ALPHABET = chr(ord(ALPHABET[-1]) + 1)

VALID_PATH = re.compile(rf"^(?:[0-9A-Za-z]{{{SEGMENT_LENGTH}}}){{1,{MAX_DEPTH}}}$")


class LevelFull(Exception):
    """All 62^5 sibling paths of one parent are taken."""


def encode_segment(number: int) -> str:
    if not 0 <= number < SEGMENTS_PER_LEVEL:
        raise LevelFull(number)
    digits = []
    for _ in range(SEGMENT_LENGTH):
        number, digit = divmod(number, BASE)
        digits.append(ALPHABET[digit])
    return "".join(reversed(digits))


def decode_segment(segment: str) -> int:
    number = 0
    for char in segment:
        number = number * BASE + ALPHABET.index(char)
    return number


def depth(path: str) -> int:
    return len(path) // SEGMENT_LENGTH


def descendants_upper_bound(parent_path: str) -> str:
    return parent_path + AFTER_ALPHABET


def next_child_path(parent_path: str, descendants_top_path: str | None) -> str:
    """The path of a new last child of `parent_path`, given the greatest path below it.

    The greatest descendant may be a grandchild; cut to the child's length it names the
    current last child (the seed's childrenTopPath), and the new child is that plus one.
    """
    if descendants_top_path is None:
        return parent_path + FIRST_SEGMENT
    child_length = len(parent_path) + SEGMENT_LENGTH
    last_child = descendants_top_path[len(parent_path) : child_length]
    return parent_path + encode_segment(decode_segment(last_child) + 1)


def is_valid(path: str) -> bool:
    return VALID_PATH.fullmatch(path) is not None
