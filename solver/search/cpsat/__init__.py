"""CP-SAT encoding of the plan search: which surviving shape, and how its layers are split
over the pipeline stages (docs/DESIGN.md section 4). Modules, in the order a search uses them:
`ortools_cp` (ortools' cp_model without pandas), `integer` (the linear form in integer quanta,
the canonical split), `exact` (each shape's exact optimum in those quanta), `model` (the CP-SAT
model), `scaling` (the guard every model passes before it is solved), `solve` (`search`: the
kept model, the checks, top-k).

What is linear once a shape k is chosen (`formulation.linear`, from `pipeline.stage_arrays`):
with w = m - 1/v and the stage slot `slot_i = l_i*layer_s + [i=0]first_s + [i=p-1]last_s + v*boundary_s`,

    T = sum_i slot_i / v                                   (a constant of the shape: sum l_i = L)
      + max_i  w*slot_i                                    ("Y": the steady-state part)
      + max_i  max(O_i, D_i - W_i + O_i)                   ("tail": exposed DP reduction + optimizer)

where D_i, W_i, O_i (data-parallel reduction, its overlap window, optimizer step) are each
linear in l_i. So per shape every term is a row `var >= a*l_i + c` under the shape's literal,
and per-stage memory is linear in l_i, so it becomes a per-(shape, stage) limit on the layer
count, precomputed with the float formulation itself (no memory quantum at all).

The model (one boolean per shape, exactly one true):
- integer l_i per stage, sum L, >= 1 on the chosen shape's stages and 0 beyond its pp;
- memory: l_i <= sum_k U[k,i] x_k (U: the most layers stage i of shape k holds within capacity);
- symmetry: middle stages are interchangeable in time and their memory limits grow with the
  stage index, so l_1 <= l_2 <= ... <= l_{p-2} loses no optimum; then only stages 0, 1, p-2
  and p-1 need time rows (3 for Y, 3 for the optimizer, 3 for the exposed reduction);
- objective = Y + tail + sum_k (sum_i slot_i / v)_k x_k, and >= sum_k lb_k x_k, capped.
  lb_k is the shape's exact optimum over its splits (`exact.shape_optima`, integer arithmetic:
  a valid bound, reached by one split), so the bound is proven at the root: the split search
  that cost CP-SAT tens of thousands of branches on a handful of shapes is done per shape
  before the model is built, and the model keeps only the shapes that can win.

Integer scaling. One time quantum q per instance: q = incumbent / 2^23, so the objective
domain, every coefficient and every constant stay below 2^23 ~ 8.4e6 (< 1e7: docs/DESIGN.md section 4:
ortools 9.15 answers wrongly with enforced rows whose coefficients reach ~4e8). Every
coefficient is rounded DOWN, so the integer objective never exceeds the float one: the
solver's bound times q is a valid lower bound of the float optimum, and the plan it returns is
within (2*L + 3) quanta of the optimum (`tolerance_s`; the realised gap is usually far
smaller). `scaling.check_scaling` measures every model before it is solved.

Never trusted unchecked: the chosen plan is re-evaluated with the float formulation (it must
fit, and its integer objective must match the solver's), the bound may not exceed it, CP-SAT's
optimum must equal the least exact optimum, and an INFEASIBLE verdict is refuted by any plan
that fits (then the model is re-solved without presolve, and the notes say so). Statuses are
`search.result.PlanStatus` values (`solve.plan_status`), never raw CP-SAT names.

Deterministic output: among the shapes that reach the proven optimum (their exact optima say
which) the first in `ParallelConfig.key()` order is returned; the split is then the canonical
one for that shape and objective (`canonical_split`: the most balanced split within the
per-stage ranges that keep the optimum). Same plan across seeds and worker counts.

Top-k: the k best distinct parallel configurations (shapes), each with its canonical split,
from one model kept across rounds: each round re-solves it with a no-good cut (x_k = 0) on the
shapes already returned. The model holds the shapes whose optimum is at most the k-th best.
"""

from .exact import NO_SPLIT, shape_optima
from .integer import IntegerForm, canonical_split
from .model import Model, add_hint, build_model
from .scaling import OBJECTIVE_UNITS, SAFE_ACTIVITY, SAFE_COEFFICIENT, ScalingError, check_scaling, model_scaling
from .solve import plan_status, search, shape_ranks, solve_model

__all__ = ["NO_SPLIT", "shape_optima", "IntegerForm", "canonical_split", "Model", "add_hint", "build_model",
           "OBJECTIVE_UNITS", "SAFE_ACTIVITY", "SAFE_COEFFICIENT", "ScalingError", "check_scaling", "model_scaling",
           "plan_status", "search", "shape_ranks", "solve_model"]
