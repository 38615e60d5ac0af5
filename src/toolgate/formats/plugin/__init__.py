"""Plugin manifests: Python and JavaScript plugins, in a folder or installed, with declared
permissions."""
