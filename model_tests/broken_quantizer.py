"""Show that the model tests' floors catch a broken quantizer.

    python model_tests/broken_quantizer.py [MODEL ...]     (default: every model test)

For each model test folder (run.sh already run once, so work/ holds the exported
IR), runs `npuopt --cfg opt.cfg` with a deliberately wrong rounding (every
requantization floors instead of rounding half to even: a bias of -0.5 LSB per
layer), writing to work/broken/, then checks that report with the floors of the
folder's run.sh. Prints one line per model; exits 1 if any floor still passed.
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BREAK = """
import sys
import torch
from npuopt.quant import qmath
_requantize = qmath.requantize

def floored(x, multiplier, shift, zp, qmin, qmax, out=None):
    # round_half_even(v) is what requantize computes; v - 0.5 rounded is floor(v) but for halves
    factor = qmath.shift_factor(multiplier, shift, x.device)
    return _requantize(x.to(torch.float64) - 0.5 / factor, multiplier, shift, zp, qmin, qmax)

qmath.requantize = floored
from npuopt.cli import main
sys.argv = ["npuopt"] + sys.argv[1:]
main()
"""


def floors_of(folder: str):
    """The check_report.py arguments and report path of the folder's run.sh."""
    text = open(os.path.join(folder, "run.sh"), encoding="utf-8").read()
    m = re.search(r"check_report\.py (work/out/\S+\.json)([^\n]*)", text)
    return m.group(1), m.group(2).split()


def main(argv):
    models = argv or sorted(d for d in os.listdir(HERE) if os.path.isfile(os.path.join(HERE, d, "run.sh")))
    still_pass = []
    for model in models:
        folder = os.path.join(HERE, model)
        report, floors = floors_of(folder)
        run = subprocess.run([sys.executable, "-c", BREAK, "--cfg", "opt.cfg", "--set", "output_dir=work/broken"],
                             cwd=folder, capture_output=True, text=True)
        if run.returncode != 0:
            print(f"{model}: npuopt failed: {run.stderr.strip().splitlines()[-1:]}")
            continue
        broken = report.replace("work/out/", "work/broken/")
        check = subprocess.run([sys.executable, os.path.join(HERE, "check_report.py"), broken, *floors],
                               cwd=folder, capture_output=True, text=True)
        verdict = check.stdout.strip().splitlines()[-1]
        print(f"{model} with floored rounding ({' '.join(floors)}): {verdict}")
        if check.returncode == 0:
            still_pass.append(model)
    if still_pass:
        print(f"floors that do not catch the broken quantizer: {', '.join(still_pass)}")
    return 1 if still_pass else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
