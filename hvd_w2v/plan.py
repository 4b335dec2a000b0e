"""`python -m hvd_w2v.plan`: the exact step's dry-run planner (hvd_w2v/planning/plan.py)."""
import sys

from .planning.plan import main

if __name__ == "__main__":
    sys.exit(main())
