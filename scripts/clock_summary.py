#!/usr/bin/env python3
"""Summarises nvidia-smi samples taken while a bench ran (scripts/device-check.sh, SAMPLE_CLOCKS=1).

Input: CSV rows without header, `timestamp, clocks.sm [MHz], clocks.mem [MHz], power.draw [W],
temperature.gpu, utilization.gpu [%], clocks_event_reasons.active` (nounits). Only samples with the
GPU busy (utilization >= 50%) count: idle gaps between figures would pull the clocks up. Prints
the SM clock, power and temperature spread and how often each clock-event reason was active, so
a run can say whether the card held its clocks (M = 8192 figures moved up to 7% between runs).
Unparsable lines (nvidia-smi errors, a torn last line) are counted and skipped.
"""
import statistics
import sys

# clocks_event_reasons bits (nvidia-smi --help-query-gpu); 0x1 (idle) is left out on purpose.
REASONS = {
    0x2: "applications clocks setting",
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake",
    0x100: "display clock setting",
}


def parse(lines):
    samples, skipped = [], 0
    for line in lines:
        fields = [f.strip() for f in line.split(",")]
        try:
            sm, power, temp, util = float(fields[1]), float(fields[3]), float(fields[4]), float(fields[5])
            reasons = int(fields[6], 16)
        except (IndexError, ValueError):
            skipped += 1
            continue
        samples.append((sm, power, temp, util, reasons))
    return samples, skipped


def spread(values):
    values = sorted(values)
    p10 = values[len(values) // 10]
    return f"min {values[0]:.0f}, p10 {p10:.0f}, median {statistics.median(values):.0f}, max {values[-1]:.0f}"


def main(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        samples, skipped = parse(f)
    busy = [s for s in samples if s[3] >= 50]
    print(f"clocks while busy: {len(busy)} of {len(samples)} samples ({skipped} unparsable lines)")
    if not busy:
        return 0
    print(f"  SM clock MHz: {spread([s[0] for s in busy])}")
    print(f"  power W: {spread([s[1] for s in busy])}")
    print(f"  temperature C: {spread([s[2] for s in busy])}")
    for bit, name in REASONS.items():
        active = sum(1 for s in busy if s[4] & bit)
        if active:
            print(f"  {name}: active in {active} of {len(busy)} busy samples ({100 * active / len(busy):.0f}%)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: clock_summary.py CLOCKS_CSV", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
