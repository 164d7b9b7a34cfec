"""A click command whose last argument is another program's command line.

``tether run claude -d`` must hand ``-d`` to claude, and ``tether run --nme x -- cmd``
must be a usage error, not a command named ``--nme``. Click either parses options
everywhere (stealing the program's ``-d``) or, ignoring unknown options, runs a typo as the
program. This command parses tether's options only up to the program's first word: it
puts a ``--`` there, so everything from it on is the program's, and anything unknown
before it is click's ordinary "No such option" (exit 2)."""

from __future__ import annotations

import click


class ArgvCommand(click.Command):
    """``leading`` positional arguments (``schedule add NAME``) come before the program."""

    def __init__(self, *args: object, leading: int = 0, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.leading = leading

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, self._mark_program(ctx, args))

    def _mark_program(self, ctx: click.Context, args: list[str]) -> list[str]:
        takes_value = {}
        for p in self.get_params(ctx):
            if isinstance(p, click.Option):
                flag = p.is_flag or p.count
                for opt in (*p.opts, *p.secondary_opts):
                    takes_value[opt] = not flag
        positionals = 0
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "--":
                return args
            if arg.startswith("--") and len(arg) > 2:
                if "=" not in arg and takes_value.get(arg):
                    i += 1  # its value
            elif arg.startswith("-") and len(arg) > 1:
                for j in range(1, len(arg)):  # a cluster: -it, -eKEY=V
                    if takes_value.get("-" + arg[j]):
                        if j == len(arg) - 1:
                            i += 1
                        break
            elif positionals == self.leading:
                return [*args[:i], "--", *args[i:]]
            else:
                positionals += 1
            i += 1
        return args
