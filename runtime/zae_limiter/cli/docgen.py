"""The command reference of docs/cli.md, generated from the click commands.

    python -m zae_limiter.cli.docgen docs/cli.md     # rewrite the generated part in place

A test checks that the page holds exactly what this module generates.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

BEGIN = "<!-- BEGIN GENERATED: python -m zae_limiter.cli.docgen docs/cli.md -->"
END = "<!-- END GENERATED -->"


def _option_line(param: click.Parameter, ctx: click.Context) -> str | None:
    if not isinstance(param, click.Option) or "--help" in param.opts:
        return None
    record = param.get_help_record(ctx)
    if record is None:
        return None
    names, text = (part.replace("|", "\\|") for part in record)
    return f"| `{names}` | {text} |"


def _paragraphs(text: str | None) -> list[str]:
    """Help text as Markdown paragraphs, each followed by a blank line."""
    lines: list[str] = []
    for paragraph in click.unstyle(text or "").strip().split("\n\n"):
        if paragraph.strip():
            lines += [" ".join(paragraph.split()), ""]
    return lines


def _command(command: click.Command, path: list[str], ctx: click.Context) -> list[str]:
    name = " ".join(path)
    usage = " ".join(command.collect_usage_pieces(ctx))
    lines = [f"### `{name}`", "", "```text", f"{name} {usage}".rstrip(), "```", ""]
    lines += _paragraphs(command.help or command.short_help)
    options = [line for p in command.get_params(ctx) if (line := _option_line(p, ctx))]
    if options:
        lines += ["| Option | Meaning |", "|---|---|", *options, ""]
    return lines


def _walk(command: click.Command, path: list[str], parent: click.Context | None) -> list[str]:
    ctx = click.Context(command, info_name=path[-1], parent=parent)
    if not isinstance(command, click.Group):
        return _command(command, path, ctx)
    lines: list[str] = []
    if parent is not None:
        lines += [f"## `{' '.join(path)}`", "", *_paragraphs(command.help)]
    for name in sorted(command.commands):
        lines += _walk(command.commands[name], [*path, name], ctx)
    return lines


def generate() -> str:
    """The generated reference: every group and command, its usage, help and options."""
    from .app import CONTEXT_SETTINGS
    from .main import cli

    ctx = click.Context(cli, info_name="zae-limiter", **CONTEXT_SETTINGS)
    lines = [
        BEGIN,
        "",
        "## Global options",
        "",
        "Accepted before or after the command.",
        "",
        "| Option | Meaning |",
        "|---|---|",
    ]
    lines += [line for p in cli.get_params(ctx) if (line := _option_line(p, ctx))]
    lines += [""]
    lines += _walk(cli, ["zae-limiter"], None)
    lines += [END]
    return "\n".join(lines) + "\n"


def update(page: Path) -> bool:
    """Replace the generated part of `page`; True if it changed."""
    text = page.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    new = head + generate().rstrip("\n") + tail
    if new != text:
        page.write_text(new)
        return True
    return False


def generated_part(page: Path) -> str:
    """What `page` holds between the markers (markers included)."""
    text = page.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end] + "\n"


if __name__ == "__main__":
    changed = update(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/cli.md"))
    print("updated" if changed else "up to date")
