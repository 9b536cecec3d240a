"""``python -m coded.cli`` is the ``coded`` command."""

import sys

from coded.cli import main

sys.exit(main())
