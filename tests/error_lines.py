"""Checking that an error names the user's line: test files mark the offending line with a
trailing comment `# <- marker` and check the error against it."""
import os

import compiler as cc


def error_checker(test_file: str):
    """(line_of, check_error) for `test_file`: `line_of(marker)` is the line that ends with
    `# <- marker`; `check_error(excinfo, cls, marker, *fragments)` asserts the error is a `cls`
    (and a CompilerError), names `file.py:LINE` of the marker and says every fragment."""
    name = os.path.basename(test_file)

    def line_of(marker: str) -> int:
        with open(test_file) as f:
            hits = [i for i, text in enumerate(f, 1)
                    if text.rstrip().endswith(f"# <- {marker}")]
        assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times"
        return hits[0]

    def check_error(excinfo, cls, marker, *fragments):
        err = excinfo.value
        assert isinstance(err, cls), f"{type(err).__name__} is not a {cls.__name__}: {err}"
        assert isinstance(err, cc.CompilerError)
        msg = str(err)
        assert f"{name}:{line_of(marker)}" in msg, msg
        for fragment in fragments:
            assert fragment in msg, f"{fragment!r} not in {msg!r}"

    return line_of, check_error
