"""Counts on the command line are ASCII digits: str.isdigit alone also passes superscripts ('²'), which int()
refuses, and `--tp ²` traced back (found by the fuzz of tests/test_hostile_cli.py). Each is now one line, exit 2."""

from __future__ import annotations

import pytest

BASE = ("--model", "gpt3-1.3b", "--cluster", "a100x8")


@pytest.mark.parametrize("argv, flag", [
    (("optimize", *BASE, "--time-limit", "0.5", "--tp", "²"), "--tp"),
    (("optimize", *BASE, "--time-limit", "0.5", "--pp", "1,³"), "--pp"),
    (("evaluate", *BASE, "--tp", "1", "--pp", "2", "--layers-per-stage", "12,1²"), "--layers-per-stage"),
    (("optimize", *BASE, "--time-limit", "0.5", "--compare", "tp=²"), "--compare"),
])
def test_a_superscript_digit_is_one_line_naming_the_flag(cli, argv, flag):
    code, out, err = cli(*argv)
    assert code == 2 and out == "", (out, err)
    assert len(err.strip().splitlines()) == 1 and flag in err, err
