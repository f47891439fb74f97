"""A fresh Python process for checks of what mxlinear reads from the environment at import."""

import os
import subprocess
import sys


def run_python(code: str, **variables: str | None) -> subprocess.CompletedProcess:
    """Runs ``code`` in a new interpreter from the tests' directory, with this process's
    environment but each named variable set to its value, or removed where the value is None."""
    env = dict(os.environ)
    for name, value in variables.items():
        env.pop(name, None)
        if value is not None:
            env[name] = value
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=os.path.dirname(__file__), timeout=300)
