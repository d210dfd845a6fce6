"""`python -m solveplan.cli`: the console entry point."""

from . import main

if __name__ == "__main__":
    main()
