"""``python -m contrastfit ...``: the CLI as a module, so launchers that start modules work
(``torchrun --nproc-per-node 2 -m contrastfit train ...``)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
