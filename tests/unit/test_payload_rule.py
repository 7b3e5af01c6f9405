"""``validation.check_payload``: free-form JSON data, refused when it is not JSON or
larger than ``MAX_PAYLOAD_BYTES`` once encoded, naming its field; ``None`` (JSON's
null, what most calls send for a result left out) is let through as it is."""

from __future__ import annotations

import math

import pytest

from corral import defaults
from corral.errors import InvalidInputError
from corral.validation import check_payload


def test_json_data_comes_back_as_it_was_given() -> None:
    data = {"files": ["a.py"], "ok": True, "n": 3, "ratio": 0.5, "none": None}
    assert check_payload(data, "result") is data
    assert check_payload(None, "result") is None
    assert check_payload("text", "result") == "text"


@pytest.mark.parametrize("bad", [math.nan, {"x": math.inf}, {"x": object()}, {1j: 1}])
def test_what_json_cannot_hold_is_refused_naming_the_field(bad: object) -> None:
    with pytest.raises(InvalidInputError, match=r"^result must be JSON data") as err:
        check_payload(bad, "result")
    assert err.value.field == "result"


def test_data_over_the_size_limit_is_refused() -> None:
    limit = defaults.MAX_PAYLOAD_BYTES
    check_payload("x" * (limit - 2), "result")  # its quotes make it exactly the limit
    with pytest.raises(InvalidInputError, match=rf"^result is larger than {limit} bytes"):
        check_payload("x" * (limit - 1), "result")
