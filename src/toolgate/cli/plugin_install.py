"""``toolgate plugins install SPEC`` and ``toolgate plugins remove NAME``.

A plugin is installed with npm (a registry spec like ``@acme/weather@1.2.0``, a tarball or a
folder) into ``$TOOLGATE_HOME/plugins``, its manifest checked before it is put there; every
gateway built from the configuration then loads it. See :mod:`toolgate.formats.plugin.install`.
"""

# No ``from __future__ import annotations``: Typer reads the annotations at runtime.

from typing import Annotated

import typer

from ..config import toolgate_home
from ..formats.plugin.install import PluginInstallError, install_plugin, remove_plugin
from .errors import EXIT_CODES_HELP, CliFailure
from .options import make_console

__all__ = ["register"]


def install(
    spec: Annotated[
        str, typer.Argument(help="An npm spec (@scope/name@version), a tarball or a folder.")
    ],
    replace: Annotated[
        bool, typer.Option("--replace", help="Replace the plugin if it is installed.")
    ] = False,
) -> None:
    """Install a plugin (and its npm dependencies) into $TOOLGATE_HOME/plugins, after
    checking its manifest. Nothing from the package runs while it is installed."""
    try:
        plugin = install_plugin(spec, toolgate_home(), replace=replace)
    except PluginInstallError as exc:
        raise CliFailure(exc.message) from None
    version = f" {plugin.version}" if plugin.version else ""
    make_console().print(
        f"Installed plugin {plugin.plugin_id}{version} in {plugin.folder}; gateways load it "
        "from there ('toolgate plugins' lists it).",
        soft_wrap=True,
    )


def remove(
    name: Annotated[str, typer.Argument(help="The plugin id (or its folder's name).")],
) -> None:
    """Remove a plugin installed with 'toolgate plugins install'."""
    try:
        plugin = remove_plugin(name, toolgate_home())
    except PluginInstallError as exc:
        raise CliFailure(exc.message) from None
    make_console().print(f"Removed plugin {plugin.plugin_id} ({plugin.folder})", soft_wrap=True)


def register(plugins_app: typer.Typer) -> None:
    """Add ``install`` and ``remove`` to ``toolgate plugins``."""
    plugins_app.command("install", epilog=EXIT_CODES_HELP)(install)
    plugins_app.command("remove", epilog=EXIT_CODES_HELP)(remove)
