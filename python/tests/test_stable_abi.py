"""The extension uses only torch's stable C ABI, so one wheel loads under later torch releases."""

import shutil
import subprocess

import pytest

import mxlinear


def test_extension_references_no_torch_cpp_symbols():
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) not found: the symbol check needs it")
    out = subprocess.run(
        [nm, "-D", "--undefined-only", "-C", mxlinear._C.__file__],
        check=True, capture_output=True, text=True,
    ).stdout
    symbols = [line.split()[-1] for line in out.splitlines() if line.strip()]
    assert any(s.startswith("aoti_torch_") for s in symbols)
    cpp = [s for s in out.splitlines() if "c10::" in s or "at::" in s or "torch::" in s]
    assert cpp == []
