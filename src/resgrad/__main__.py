"""``python -m resgrad`` is the ``resgrad`` command."""

import sys

from resgrad.cli import main

sys.exit(main())
