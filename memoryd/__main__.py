"""``python -m memoryd``: the same as the ``memoryd`` command."""

import sys

from memoryd.cli import command_line

sys.exit(command_line())
