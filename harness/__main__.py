"""`python -m harness COMMAND`: the package run as a program, which is cli.main and its exit code."""

import sys

from harness.cli import main

sys.exit(main())
