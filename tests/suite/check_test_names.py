#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every Catch2 TEST_CASE name under tests/ is one CTest can run (ctest: suite/…): catch_discover_tests registers a
test per name, and CTest cuts a name at ';' (a CMake list separator) and mangles backslashes, so such a test's halves
match no test case and fail under --warn NoTests, only when the suite runs. This names the file and line at once.
Usage: check_test_names.py <source dir>"""
import re
import sys
from pathlib import Path

NAME = re.compile(r'TEST_CASE\(((?:\s*"(?:[^"\\]|\\.)*")+)')


def main(source: Path) -> int:
    bad = []
    for path in sorted((source / "tests").rglob("*.cpp")):
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in NAME.finditer(text):
            name = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', match.group(1)))
            if ";" in name or "\\" in name:
                line = text.count("\n", 0, match.start()) + 1
                bad.append(f"{path.relative_to(source)}:{line}: test name with ';' or a backslash: {name[:80]}")
    for b in bad:
        print(b, file=sys.stderr)
    print(f"check_test_names: {len(bad)} bad test names")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
