"""`python -m solveplan`: the console entry point."""

from .cli import main

if __name__ == "__main__":
    main()
