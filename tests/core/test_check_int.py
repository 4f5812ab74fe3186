"""``check_int``: the one checker of integer options, resume-state fields and counts."""

from __future__ import annotations

import numpy as np
import pytest

from stream_plugin.errors import ConfigError, ConfigTypeError, IndexFormatError, StateError, check_int


def test_check_int_returns_plain_ints_and_none_where_allowed() -> None:
    assert check_int("n", 3) == 3
    value = check_int("n", np.int64(7), minimum=1)
    assert value == 7 and type(value) is int
    assert check_int("n", None, allow_none=True) is None


@pytest.mark.parametrize(
    ("value", "bounds", "error", "message"),
    [
        (0, {"minimum": 1}, ConfigError, r"^n: expected an int >= 1, found 0$"),
        (
            0,
            {"minimum": 1, "allow_none": True},
            ConfigError,
            r"^n: expected a positive int or None, found 0$",
        ),
        (-1, {"minimum": 0, "allow_none": True}, ConfigError, r"^n: expected an int >= 0 or None, found -1$"),
        (9, {"minimum": 0, "maximum": 8}, ConfigError, r"^n: expected an int in \[0, 8\], found 9$"),
        (9, {"maximum": 8}, ConfigError, r"^n: expected an int <= 8, found 9$"),
        (True, {}, ConfigTypeError, r"^n: expected an int, found bool True$"),
        ("3", {"minimum": 1}, ConfigTypeError, r"^n: expected an int >= 1, found str '3'$"),
        (2.0, {}, ConfigTypeError, r"^n: expected an int, found float 2.0$"),
        (None, {"minimum": 1}, ConfigTypeError, r"^n: expected an int >= 1, found None$"),
    ],
)
def test_check_int_refuses_wrong_types_and_values_with_one_message(
    value: object, bounds: dict[str, int], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        check_int("n", value, **bounds)  # type: ignore[call-overload]


def test_check_int_raises_the_callers_class_with_the_fix() -> None:
    with pytest.raises(
        StateError, match=r"^resume state: epoch: expected an int, found str 'x'; restore it$"
    ):
        check_int("resume state: epoch", "x", error=StateError, fix="restore it")
    with pytest.raises(
        IndexFormatError, match=r"samples: expected an int >= 0, found -2; regenerate the index"
    ):
        check_int("samples", -2, minimum=0, error=IndexFormatError, fix="regenerate the index")
    # A wrong type is a TypeError only for options: other classes keep their own (ValueError) family.
    with pytest.raises(StateError) as raised:
        check_int("n", 1.5, error=StateError)
    assert not isinstance(raised.value, TypeError)
