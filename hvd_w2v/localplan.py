"""`python -m hvd_w2v.localplan`: shard-local SGD's dry-run planner (hvd_w2v/planning/localplan.py)."""
import sys

from .planning.localplan import main

if __name__ == "__main__":
    sys.exit(main())
