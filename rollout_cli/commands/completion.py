"""`rollout completion SHELL`: click's completion script for bash, zsh or fish."""

from __future__ import annotations

import click


@click.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the shell completion script for SHELL.

    \b
    bash:  eval "$(rollout completion bash)"     (e.g. in ~/.bashrc)
    zsh:   eval "$(rollout completion zsh)"      (e.g. in ~/.zshrc)
    fish:  rollout completion fish > ~/.config/fish/completions/rollout.fish
    """
    from click.shell_completion import get_completion_class

    completion_class = get_completion_class(shell)
    assert completion_class is not None  # click ships bash, zsh and fish
    root = ctx.find_root().command
    click.echo(completion_class(root, {}, "rollout", "_ROLLOUT_COMPLETE").source())
