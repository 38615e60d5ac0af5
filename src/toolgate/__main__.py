"""``python -m toolgate``: the command line (what ``toolgate serve --workers`` starts)."""

from toolgate.cli import main

main()
