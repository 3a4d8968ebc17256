"""``python -m mxrt SCRIPT [ARGS...]``: runs an unmodified MXNet script on libmxrt."""
import sys

from ._run import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
