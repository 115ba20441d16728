"""``quality/compare_revisions.py --time`` under its former name, with the same flags."""

import sys

from benchmarks.quality.compare_revisions import main

if __name__ == "__main__":
    main(["--time", *sys.argv[1:]])
