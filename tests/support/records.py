"""A record built another way than by its constructor is that record in every way."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import Any

import pytest


def assert_the_same_record(got: Any, expected: Any, *, hashable: bool = True) -> None:
    """``got`` is ``expected``'s class and equals it, shows and copies as it does, is
    frozen, pickles and takes ``dataclasses.replace`` (``hashable``: hashes alike)."""
    assert type(got) is type(expected)
    assert got == expected and repr(got) == repr(expected)
    if hashable:
        assert hash(got) == hash(expected)
    assert dataclasses.asdict(got) == dataclasses.asdict(expected)
    first = dataclasses.fields(got)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(got, first, getattr(got, first))
    assert pickle.loads(pickle.dumps(got)) == got
    assert copy.copy(got) == got and copy.deepcopy(got) == got
    assert dataclasses.replace(got) == got
