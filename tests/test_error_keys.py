"""An unknown key the user wrote with a newline or a control character is named escaped, so the error stays
one line (found by the fuzz of tests/test_hostile_api.py: a model mapping whose only key was a newline)."""

from __future__ import annotations

import pytest

from solveplan import api
from solveplan.errors import InputError


@pytest.mark.parametrize("key", ["\n", "a\rb", "\x1b[31m"])
def test_an_unknown_key_with_a_control_character_is_escaped(key):
    with pytest.raises(InputError) as err:
        api.check({"model": {key: None}, "cluster": "a100x8"}, time_limit_s=0.3)
    text = f"{err.value.field}: {err.value.message}"
    assert "\n" not in text and "\r" not in text and "\x1b" not in text
    assert key.encode("unicode_escape").decode("ascii") in text and "unknown key" in text
