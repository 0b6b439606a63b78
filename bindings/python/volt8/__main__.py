"""`python -m volt8 COMMAND ...`: the packaged volt8 command, as the wheel's `volt8` console script runs it."""
import sys

from ._cli import main

sys.exit(main())
