"""Which declared code files are JavaScript: plugin entries and capability tools modules with
these suffixes run on the JavaScript host (SES compartments), the rest is Python."""

__all__ = ["JS_SUFFIXES"]

#: Files with these suffixes are JavaScript (or TypeScript) entries, run on the JavaScript host.
JS_SUFFIXES: tuple[str, ...] = (".ts", ".mts", ".js", ".mjs")
