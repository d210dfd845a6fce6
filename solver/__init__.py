"""solveplan: provably optimal parallel training plans for LLMs on GPU clusters.

The folders are the flow, in one direction (docs/DESIGN.md section 2; README "Layout"); a module
imports only its own stage or an earlier one (tests/test_architecture.py checks it):

    errors.py        InputError: bad input named by its spec path
    specs/           frozen pydantic specs (model, gpu, cluster, job, hf), units, and
                     request.py: the one schema of a job mapping (CLI, API, service)
    catalog.py       catalog names, files and job mappings -> specs (`load_job`)
    space/           legal shapes (shapes, enumeration) and the rules that complete an
                     explicit configuration (rules)
    formulation/     step time and memory: flops, comm, coefficients, pipeline (the one
                     stage composition), splits (balanced, water-filling), linear
    search/          candidates (enumerate, price, prune; keeps what it derives), pruning,
                     cpsat/ (integer form, exact, model, scaling, solve), baselines/, joint/
                     (shape, split, pool and nodes at once), phases (the one time runner)
    plan.py          the plan value type; explicit and textbook configurations
    diagnose.py      why no plan fits; the fewest GPUs that would do
    placement/       a fixed plan's groups placed on unequal links; the link files
    optimize/        optimize(): candidates -> search -> plans -> checked verdict, for every
                     cluster (joint, placed: the joint model's steps and its placed plan)
    calibration/     fits to nccl-tests logs and measured steps; published runs
    render/          table, json, megatron, timeline, hostfile, calibration report
    admission/       bounded-time check, plan, fewest GPUs, admit (behind api.py)
    api.py service.py  thin facades: Python API, HTTP service
    cli/             click only: flags <-> spec paths
"""

__version__ = "0.1.0"
