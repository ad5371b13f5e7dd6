"""airq_cli.progress: a bar only on a terminal, plain lines per tenth of the work otherwise."""

from __future__ import annotations

import io

from airq_cli import Progress, progress


def test_plain_lines_per_tenth_and_at_the_end():
    out = io.StringIO()  # not a terminal
    assert list(progress(range(25), desc="heuristic", file=out)) == list(range(25))
    lines = out.getvalue().splitlines()
    assert len(lines) == 9 and lines[0].startswith("heuristic: 3/25 ep (12%), ")
    assert lines[-1].startswith("heuristic: 25/25 ep (100%), ")
    assert "\r" not in out.getvalue()


def test_postfix_every_and_close():
    out = io.StringIO()
    with Progress(100, "policy1 ppo", unit="steps", every=50, file=out) as bar:
        bar.update(30, postfix="train success 10%")
        bar.update(30, postfix="train success 20%")  # passes 50: a line
        bar.update(10)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2  # the second from close(): the count moved since the last line
    assert lines[0].startswith("policy1 ppo: 60/100 steps (60%)") and lines[0].endswith("train success 20%")
    assert lines[1].startswith("policy1 ppo: 70/100 steps (70%)")


def test_quiet_shows_nothing_and_terminal_gets_a_bar():
    out = io.StringIO()
    with Progress(5, "x", file=out, quiet=True) as bar:
        bar.update(5)
    assert out.getvalue() == ""
    with Progress(5, "x", file=out, terminal=True) as bar:
        bar.update(5)
    assert "\r" in out.getvalue()  # tqdm's redraws
