"""The command line of ``python -m mxlinear.bench`` where no GPU is needed: help, argument errors,
and the no-GPU exit."""

import os
import subprocess
import sys

import pytest


def bench(*args, hide_gpus=False):
    env = dict(os.environ)
    if hide_gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""  # the no-GPU path, also on a machine that has one
    return subprocess.run([sys.executable, "-m", "mxlinear.bench", *args], check=False,
                          capture_output=True, text=True, env=env, timeout=300)


def test_help_lists_the_parts_and_options():
    r = bench("--help")
    assert r.returncode == 0, r.stderr
    for word in ("Host overhead", "CUDA graph", "--shapes", "--m", "--json", "--parts",
                 "--activation", "W8A16"):
        assert word in r.stdout


def test_without_a_gpu_it_says_so_and_exits_2(tmp_path):
    out = tmp_path / "bench.json"
    r = bench("--json", str(out), hide_gpus=True)
    assert r.returncode == 2
    assert "mxlinear.bench: no CUDA device" in r.stderr
    assert "Hopper" in r.stderr
    assert not out.exists()  # nothing measured, nothing written


@pytest.mark.parametrize(
    "args, message",
    [
        (("--shapes", "4096x100"), "argument --shapes: has '4096x100'; expected NxK"),
        (("--shapes", "4096"), "argument --shapes: has '4096'; expected NxK"),
        (("--shapes", "0x64"), "argument --shapes: has '0x64'"),
        (("--m", "1,0"), "argument --m: has '0'; expected positive integers"),
        (("--m", "one"), "argument --m: has 'one'"),
        (("--parts", "host,disk"), "argument --parts: has ['disk']; expected some of host"),
        (("--host-iters", "-3"), "argument --host-iters: is '-3'; expected a positive integer"),
        (("--activation", "mx,fp4"), "argument --activation: has ['fp4']; expected some of mx, "
                                     "bf16"),
    ],
)
def test_bad_arguments_are_named_with_their_value(args, message, capsys):
    # Arguments are checked before the GPU is looked for, so the errors show on any machine.
    from mxlinear import bench as b

    with pytest.raises(SystemExit) as exit_:
        b.parse_args(list(args))
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_parsers_accept_what_the_help_promises():
    from mxlinear import bench as b

    assert b.parse_shapes("2560x6144, 6144X2048") == [("2560x6144", 2560, 6144),
                                                      ("6144x2048", 6144, 2048)]
    assert b.parse_ms("1,32,8192") == [1, 32, 8192]
    args = b.parse_args([])
    assert [(n, k) for _, n, k in args.shapes] == [(n, k) for _, n, k in b.DEFAULT_SHAPES]
    assert args.m == [1, 32, 128, 512, 2048, 8192]
    assert args.activation == ["mx", "bf16"]  # both modes by default
    assert b.parse_args(["--activation", "bf16"]).activation == ["bf16"]
    assert b.parse_activations("bf16, mx,bf16") == ["bf16", "mx"]
    # The default shapes are distinct layer shapes, K a multiple of 32 as the op requires.
    assert len({(n, k) for _, n, k in b.DEFAULT_SHAPES}) == len(b.DEFAULT_SHAPES)
    assert all(k % 32 == 0 for _, _, k in b.DEFAULT_SHAPES)


def test_rotation_covers_three_times_l2():
    from mxlinear._bench_timing import rotation_copies

    l2 = 60 << 20
    for weight_bytes in (1 << 10, 5 << 20, 38 << 20, 75 << 20, 1 << 30):
        copies = rotation_copies(weight_bytes, l2)
        assert copies >= 2
        assert copies * weight_bytes >= 3 * l2
        assert copies == 2 or (copies - 1) * weight_bytes < 3 * l2  # no more than needed


def test_render_shows_each_mode():
    from mxlinear import bench as b

    results = {
        "mxlinear": "0.1.0", "torch": "2.11", "device": "H200", "skipped": {},
        "host": {"iters": 10, "trials": 3, "rows": [
            {"activation": a, "m": 1, "n": 64, "k": 64, "op_us": 5.0, "library_us": 4.0,
             "overhead_us": 1.0} for a in b.ACTIVATIONS]},
        "gpu": {"replays": 3, "rows": [
            {"name": "l", "activation": "mx", "n": 64, "k": 64, "m": 1, "mxlinear_us": 2.0,
             "bf16_linear_us": 3.0, "speedup": 1.5},
            {"name": "l", "activation": "bf16", "n": 64, "k": 64, "m": 1, "wrong": True,
             "guard_rel_error": 1.0}],
            "geomean_speedup": {"mx": {"1": 1.5}, "bf16": {"1": None}}},
        "graph": {"calls_per_graph": 4, "replays": 3, "rows": [
            {"name": "l", "activation": "bf16", "n": 64, "k": 64, "m": 1, "op_us": 2.0,
             "library_us": 2.0, "ratio": 1.0}]},
    }
    text = b.render(results)
    assert "activation mx (above 1: mxlinear faster): M=1: 1.500" in text
    assert "activation bf16 (above 1: mxlinear faster): M=1: n/a" in text
    assert "WRONG" in text
    host = text.split("\n\n")[1].splitlines()
    assert host[1].split()[:2] == ["act", "M"]
    assert [line.split()[0] for line in host[2:]] == ["mx", "bf16"]
