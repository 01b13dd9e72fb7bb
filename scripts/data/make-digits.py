#!/usr/bin/env python3
"""Make train/data/digits.csv: the handwritten digits set that scikit-learn ships.

The data (1797 samples, 8x8 images of integer pixels 0..16, a label 0..9 in the last column) is
scikit-learn's sklearn/datasets/data/digits.csv.gz, a copy of the test set of the UCI ML "Optical
Recognition of Handwritten Digits" data set (E. Alpaydin, C. Kaynak, 1998; CC BY 4.0).
scikit-learn is BSD-3-Clause. This script needs only the Python standard library: it reads the
file from an installed scikit-learn (Debian: `apt-get install python3-sklearn`), or from a Debian
package file given with --deb (`apt-get download python3-sklearn`), checks its shape and ranges,
and writes it uncompressed with Unix line endings.

    scripts/data/make-digits.py                      # from the installed python3-sklearn
    scripts/data/make-digits.py --deb python3-sklearn_1.2.1+dfsg-1_all.deb
    scripts/data/make-digits.py --out /tmp/digits.csv
"""

import argparse
import csv
import gzip
import hashlib
import io
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.normpath(os.path.join(HERE, "..", "..", "train", "data", "digits.csv"))
MEMBER = "sklearn/datasets/data/digits.csv.gz"
INSTALLED = [
    os.path.join("/usr/lib/python3/dist-packages", MEMBER),
]


def installed_copy():
    """The gzip file of an installed scikit-learn, or None."""
    try:
        import sklearn  # noqa: F401  (only to find where it lives)

        path = os.path.join(os.path.dirname(sklearn.__file__), "datasets", "data", "digits.csv.gz")
        if os.path.isfile(path):
            return path
    except ImportError:
        pass
    for path in INSTALLED:
        if os.path.isfile(path):
            return path
    return None


def from_deb(deb):
    """The gzip bytes of the digits file inside a python3-sklearn .deb (via dpkg-deb)."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["dpkg-deb", "-x", deb, tmp], check=True)
        path = os.path.join(tmp, "usr/lib/python3/dist-packages", MEMBER)
        if not os.path.isfile(path):
            sys.exit(f"make-digits: {deb} holds no {MEMBER}")
        with open(path, "rb") as f:
            return f.read()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deb", help="read the data from this python3-sklearn .deb instead")
    ap.add_argument("--out", default=DEFAULT_OUT, help="where to write (default: train/data/digits.csv)")
    args = ap.parse_args()

    if args.deb:
        raw = from_deb(args.deb)
        source = args.deb
    else:
        path = installed_copy()
        if path is None:
            sys.exit(
                "make-digits: scikit-learn is not installed; `apt-get install python3-sklearn`, "
                "or `apt-get download python3-sklearn` and pass the .deb with --deb"
            )
        with open(path, "rb") as f:
            raw = f.read()
        source = path

    rows = list(csv.reader(io.StringIO(gzip.decompress(raw).decode("ascii"))))
    if len(rows) != 1797:
        sys.exit(f"make-digits: expected 1797 samples, found {len(rows)}")
    counts = [0] * 10
    for i, row in enumerate(rows):
        if len(row) != 65:
            sys.exit(f"make-digits: sample {i} has {len(row)} columns, not 64 pixels + a label")
        values = [int(float(v)) for v in row]
        if any(not 0 <= v <= 16 for v in values[:64]) or not 0 <= values[64] <= 9:
            sys.exit(f"make-digits: sample {i} is out of range")
        counts[values[64]] += 1
        rows[i] = values

    text = "".join(",".join(str(v) for v in row) + "\n" for row in rows)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", newline="\n") as f:
        f.write(text)
    digest = hashlib.sha256(text.encode("ascii")).hexdigest()
    print(f"make-digits: {len(rows)} samples from {source} -> {args.out}")
    print(f"make-digits: samples per class {counts}; sha256 {digest}")


if __name__ == "__main__":
    main()
