"""What importing the CP-SAT path costs a process (issue #14: import only what is used):
ortools' cp_model without pandas, native modules bound lazily and the process's dlopen flags
left as they were, and a model still solves."""

import subprocess
import sys

CODE = """
import os, sys
flags = sys.getdlopenflags()
from solveplan.search.cpsat.ortools_cp import cp_model
m = cp_model.CpModel(); x = m.new_int_var(0, 10, "x"); m.add(x >= 3); m.minimize(x)
s = cp_model.CpSolver(); st = s.solve(m)
print(int(sys.getdlopenflags() == flags), int("pandas" in sys.modules), int(st == cp_model.OPTIMAL), int(s.value(x)))
"""


def test_cp_model_imports_without_pandas_and_restores_the_dlopen_flags():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["1", "0", "1", "3"]


def test_the_optimize_command_does_not_import_pandas():
    code = ("import sys, runpy; sys.argv = ['solveplan', 'optimize', '--model', 'gpt3-1.3b', '--cluster', 'a100x8', "
            "'--json']\ntry:\n    runpy.run_module('solveplan.cli', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print('PANDAS' if 'pandas' in sys.modules else 'NO-PANDAS', file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "NO-PANDAS" in proc.stderr, proc.stderr[-500:]
