"""README's Layout names each top-level folder once (``examples/`` and
``deploy/kubernetes/`` were listed twice, with different contents)."""

from __future__ import annotations

import re
from collections import Counter

from tests.unit.test_docs import _layout


def test_the_layout_names_each_entry_once() -> None:
    entries = [m.group(1) for m in re.finditer(r"^(\S+)", _layout(), flags=re.MULTILINE)]
    twice = sorted(name for name, n in Counter(entries).items() if n > 1)
    assert twice == [], f"README's Layout lists these more than once: {twice}"
