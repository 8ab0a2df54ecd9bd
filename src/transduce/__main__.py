"""``python -m transduce`` (and ``torchrun -m transduce train ...``)."""

import sys

from .cli.main import main

sys.exit(main())
