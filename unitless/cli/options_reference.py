"""The options reference (docs/options.md), written from the command's own parser, so that it
cannot say what `unitless <command> --help` does not.

    python -m unitless.cli.options_reference > docs/options.md
"""
import argparse

from ..runtime import runners
from .main import parser

HEADER = """# Options reference

Generated from the `unitless` command's parser (`python -m unitless.cli.options_reference >
docs/options.md`; `tests/project/test_docs.py` checks it against `unitless <command> --help`). An
option neither unitless nor Apache Beam declares is refused in one line, except on a job
server's runner ({job_servers}), which checks it against the options the job server
declares when the job is submitted (Flink's own, such as `--max_bundle_size` and
`--max_bundle_time_mills`). Refused on every runner:
{refused}
"""


def _subcommands(top):
    action, = (a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in action._choices_actions}
    return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]


def _flat(text):
    return " ".join(str(text).split()).replace("|", "\\|")


def _what(action):
    """What an option takes: its choices, its metavar, or nothing for a flag."""
    if action.nargs == 0:
        return "(flag)"
    if action.choices:
        return " \\| ".join(f"`{c}`" for c in action.choices)
    return f"`{_flat(action.metavar or action.dest.upper())}`"


def _default(action):
    if action.nargs == 0 or action.default in (None, "", [], argparse.SUPPRESS):
        return ""
    return f"`{action.default}`"


def rows(sub: argparse.ArgumentParser) -> list[tuple[str, str, str, str]]:
    """(names, what it takes, default, help) of each option of a subcommand, in --help order."""
    out = []
    for action in sub._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        names = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.dest}`"
        out.append((names, _what(action), _default(action), _flat(action.help or "")))
    return out


def render() -> str:
    top = parser()
    refused = "\n".join(f"* `--{name}`: {_flat(why)}" for name, why in runners.REFUSED.items())
    job_servers = ", ".join(f"`--runner {name.capitalize()}Runner`"
                            for name in runners.JOB_SERVER_RUNNERS)
    text = [HEADER.format(job_servers=job_servers, refused=refused)]
    for name, summary, sub in _subcommands(top):
        text.append(f"## `unitless {name}`: {_flat(summary)}\n")
        text.append("| option | takes | default | meaning |\n|---|---|---|---|")
        text += [f"| {' | '.join(row)} |" for row in rows(sub)]
        text.append("")
    return "\n".join(text)


if __name__ == "__main__":
    print(render(), end="")
