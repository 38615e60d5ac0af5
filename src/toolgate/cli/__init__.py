"""The ``toolgate`` command line."""


def main() -> None:
    """Entry point of the ``toolgate`` console script."""
    from .app import run

    run()
