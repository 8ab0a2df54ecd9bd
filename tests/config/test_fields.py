"""What the config classes share: checked types, parsed overrides, ranges, nearest-name hints."""

from __future__ import annotations

import dataclasses
from typing import Optional

import pytest

from transduce.config.fields import (ConfigMixin, check_numbers, choice, option, parse_value,
                                     unknown_key_error)


@dataclasses.dataclass(frozen=True)
class Example(ConfigMixin):
    size: int = option(4, "a size", low=1, high=10)
    rate: float = option(0.5, "a rate", low=0, high=1)
    on: bool = option(False, "a switch")
    name: str = option("a", "a name", ("a", "b"))
    limit: Optional[int] = option(None, "an optional limit")

    def __post_init__(self) -> None:
        check_numbers(self)


@pytest.mark.parametrize("text, value", [("1", True), ("yes", True), ("on", True),
                                         ("0", False), ("off", False), ("FALSE", False)])
def test_a_switch_is_parsed_from_its_usual_spellings(text, value):
    assert parse_value("on", text, bool) is value


def test_strings_parse_to_the_field_type_and_none_to_an_optional():
    assert parse_value("size", "7", int) == 7 and parse_value("rate", "1e-3", float) == 0.001
    assert parse_value("limit", "none", Optional[int]) is None
    assert parse_value("limit", "3", Optional[int]) == 3
    with pytest.raises(ValueError, match=r"on='maybe': expected a value of type bool"):
        parse_value("on", "maybe", bool)
    with pytest.raises(ValueError, match="expected a value of type int"):
        parse_value("size", "2.5", int)


def test_from_dict_checks_every_value_against_its_type():
    assert Example.from_dict({"size": 3, "rate": 1}).rate == 1.0  # an int is a float
    with pytest.raises(ValueError, match=r"size = '3': expected a value of type int, got str"):
        Example.from_dict({"size": "3"})
    with pytest.raises(ValueError, match="expected a value of type int, got bool"):
        Example.from_dict({"size": True})  # a bool is not a number here
    with pytest.raises(ValueError, match="is a JSON object of fields, not list"):
        Example.from_dict([1, 2])
    with pytest.raises(ValueError, match="did you mean 'size'"):
        Example.from_dict({"sise": 3})


def test_overrides_are_checked_and_leave_the_original_alone():
    first = Example()
    second = first.with_overrides({"size": "9", "on": True, "limit": "5"})
    assert (second.size, second.on, second.limit) == (9, True, 5) and first.size == 4
    with pytest.raises(ValueError, match="size must be at most 10, got 11"):
        first.with_overrides({"size": "11"})
    with pytest.raises(ValueError, match="rate must be a finite number"):
        first.with_overrides({"rate": "nan"})
    with pytest.raises(ValueError, match="size must be at least 1, got 0"):
        Example(size=0)


def test_json_round_trips_and_tuples_come_back_as_lists():
    assert Example.from_json(Example(size=2, name="b").to_json()) == Example(size=2, name="b")

    @dataclasses.dataclass
    class Pair(ConfigMixin):
        both: tuple = (1, 2)

    assert Pair().to_dict() == {"both": [1, 2]}


def test_a_wrong_choice_suggests_the_nearest_and_lists_the_rest():
    with pytest.raises(ValueError, match=r"name='bb' is not supported \(did you mean 'b'\?\); "
                                         "choose one of a, b"):
        choice("name", "bb", ("a", "b"))
    choice("name", "a", ("a", "b"))


def test_an_unknown_name_gets_hints_or_the_list_when_it_is_short():
    assert "did you mean 'warmup'" in str(unknown_key_error("warmpu", ["warmup", "seed"], "x"))
    assert "(known: a, b)" in str(unknown_key_error("zzz", ["b", "a"], "x"))
    many = [f"name{n}" for n in range(20)]
    assert "none of the 20 known names is close" in str(unknown_key_error("zzz", many, "x"))
