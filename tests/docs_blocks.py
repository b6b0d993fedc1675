"""The console examples of a docs page, for the suites that run one as printed where
`cargo test` cannot (a server, `mpirun`): `tests/it/docs_examples.rs` checks that the suite
named by a block's `<!-- docs-examples: run by SUITE: REASON -->` marker reads its page.

Run as a script, `python3 tests/docs_blocks.py PAGE MARKER` runs the block's commands one shell
each in the current folder and exits 1 when one fails or prints other than the page says.
"""

import subprocess
import sys


def console_block(path, marker):
    """The steps, [(command, [output lines])], of the `console` block just after the line of
    the page at `path` that contains `marker`."""
    lines = open(path).read().splitlines()
    at = next(i for i, line in enumerate(lines) if marker in line)
    assert lines[at + 1].strip() == "```console", lines[at + 1]
    steps, continued = [], False
    for line in lines[at + 2:]:
        if line.strip() == "```":
            break
        if continued:
            steps[-1][0] += "\n" + line
            continued = line.endswith("\\")
        elif line.startswith("$ "):
            steps.append([line[2:], []])
            continued = line.endswith("\\")
        else:
            steps[-1][1].append(line)
    return steps


def matches(expected, actual):
    """`actual` is `expected`, where a line `...` stands for any number of lines."""
    if not expected:
        return not actual
    if expected[0].strip() == "...":
        return any(matches(expected[1:], actual[skip:]) for skip in range(len(actual) + 1))
    return bool(actual) and actual[0] == expected[0] and matches(expected[1:], actual[1:])


def main(path, marker):
    ok = True
    for command, expected in console_block(path, marker):
        result = subprocess.run(command, shell=True, capture_output=True, text=True)
        if result.returncode != 0 or not matches(expected, result.stdout.splitlines()):
            print("$ %s\nexit %d\n%s%s" % (command, result.returncode, result.stdout, result.stderr))
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
