"""Help that shows each option's default, for every command."""

from __future__ import annotations

import argparse


def _shown(default: object) -> bool:
    return (
        default is not None
        and default is not False
        and default != argparse.SUPPRESS
        and default != []
    )


def show_defaults(parser: argparse.ArgumentParser) -> None:
    """Append "(default: X)" to the help of every option with a default worth showing, in
    this parser and its sub-commands; help that already names its default is left alone."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                show_defaults(sub)
            continue
        if not action.option_strings or action.help == argparse.SUPPRESS:
            continue
        if action.nargs == 0:  # flags: their default is "off"
            continue
        if not _shown(action.default):
            continue
        text = action.help or ""
        if "default" in text.lower():
            continue
        default = action.default
        shown = " ".join(map(str, default)) if isinstance(default, list | tuple) else default
        suffix = f"(default: {str(shown).replace('%', '%%')})"
        action.help = f"{text} {suffix}" if text else suffix
