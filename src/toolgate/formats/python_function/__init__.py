"""Python functions registered with ``@tool`` (modules and files named in ``toolgate.yaml``)."""
