"""Prints what an installed distribution requires in this environment (markers evaluated, no
extras), one requirement a line, leaving out the projects named after it.

    python vllm_requirements.py vllm flashinfer-python

test-vllm.sh installs vLLM without dependencies and then these, so that a pin PyPI no longer
serves does not stop the whole install."""

import sys
from importlib.metadata import requires

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def main(distribution: str, leave_out: list[str]) -> None:
    skip = {canonicalize_name(name) for name in leave_out}
    for line in requires(distribution) or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if canonicalize_name(req.name) in skip:
            continue
        req.marker = None
        print(req)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: vllm_requirements.py DISTRIBUTION [PROJECT_TO_LEAVE_OUT ...]")
    main(sys.argv[1], sys.argv[2:])
