"""`python -m nicplug.adapters.cli` is the same as the `nicplug` console script."""

from nicplug.adapters.cli import main

main()
