"""Summarise an Nsight Compute source page by kernel phase: the warp-state samples and the
instructions executed in each span of SASS between barriers and atomics (a cooperative
kernel's phases end at its grid barriers). Make the CSV on the device with

    ncu --section SourceCounters -o prof python3 .ci/ncu_probe.py ...
    ncu --import prof.ncu-rep --page source --csv --print-source sass > source.csv

then: python3 .ci/ncu_source_phases.py source.csv [kernel number, default 0] [min % shown]
"""
import csv
import sys


def kernels(path):
    """[(kernel name, header row, instruction rows)] in the CSV's order."""
    found, current = [], None
    for row in csv.reader(open(path)):
        if row and row[0] == "Kernel Name":
            current = [row[1], None, []]
            found.append(current)
        elif current is not None and current[1] is None:
            current[1] = row
        elif current is not None:
            current[2].append(row)
    return found


def main():
    path, which = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0
    shown = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    name, header, body = kernels(path)[which]
    samples = header.index("Warp Stall Sampling (All Samples)")
    executed = header.index("Instructions Executed")
    total = sum(int(r[samples]) for r in body) or 1
    print(name[:100], "-", total, "samples")
    start, span_samples, span_executed = 0, 0, 0
    for k, row in enumerate(body):
        sass = row[1].strip()
        span_samples += int(row[samples])
        span_executed += int(row[executed] or 0)
        if any(mark in sass for mark in ("BAR.SYNC", "MEMBAR", "EXIT", "ATOM", "RED.")) or k == len(body) - 1:
            if 100.0 * span_samples / total >= shown:
                print(f"{start:5d}-{k:5d} {100.0 * span_samples / total:5.1f}% warp-instr={span_executed:>10}  ends with {sass[:60]}")
            start, span_samples, span_executed = k + 1, 0, 0


if __name__ == "__main__":
    main()
