"""Convert a checkpoint written by an earlier version of train.py to plain data, once, so that
`--resume` (which reads .pt files only with torch's restricted unpickler) can load it.

Earlier versions stored numpy's RNG key array as a numpy array and, under DeepSpeed, the loss
scaler and the ZeRO stage as DeepSpeed objects. This script loads such files with the full
unpickler, which can run code: run it only on a checkpoint whose writer you trust. It refuses a
file that names anything beyond what those versions wrote, and leaves plain files as they are.

    python scripts/convert_checkpoint.py runs/tiny_qae/checkpoints/step_000040
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infra import safe_state  # noqa: E402  (after the path to the repository root)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path, help="a checkpoint directory (checkpoints/step_NNNNNN)")
    args = parser.parse_args(argv)
    files = sorted(args.checkpoint.glob("*.pt"))
    if not files:
        print(f"error: `{args.checkpoint}` holds no .pt file: give a checkpoint directory", file=sys.stderr)
        return 2
    for file in files:
        try:
            converted = safe_state.convert(file)
        except safe_state.StateFileError as e:
            print(f"error: {file} {e}; not converted", file=sys.stderr)
            return 2
        print(f"{file}: {'converted to plain data' if converted else 'plain data already, left as it is'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
