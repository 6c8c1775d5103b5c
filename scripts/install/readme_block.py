#!/usr/bin/env python3
"""Print one code block of a README, the one right after the marker line
``<!-- install-test: NAME -->``, so that an install test runs what the README shows.

    scripts/install/readme_block.py clients/go/README.md example
"""

import re
import sys


def block(text: str, name: str) -> str:
    marker = re.escape(f"<!-- install-test: {name} -->")
    found = re.search(marker + r"\s*\n(`{3,})[^\n]*\n(.*?)\n\1[ \t]*$", text, re.S | re.M)
    if not found:
        raise SystemExit(f"no code block after <!-- install-test: {name} --> in the README")
    return found.group(2) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    with open(sys.argv[1], encoding="utf-8") as readme:
        sys.stdout.write(block(readme.read(), sys.argv[2]))
