"""`python -m hvd_w2v.memory`: the memory plan (hvd_w2v/planning/memory.py)."""
import sys

from .planning.memory import main

if __name__ == "__main__":
    sys.exit(main())
