"""Regenerate the committed Python modules from the .proto files.

    python -m fleetscope.proto.generate            # rewrite proto/v1/*_pb2*.py
    python -m fleetscope.proto.generate --check    # exit 1 when the committed files are stale

The virtual include path (``-Ifleetscope/proto=proto``) makes the generated code import
``fleetscope.proto.v1`` however the repository folder is named.
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def generate(out_dir: Path) -> list[Path]:
    from grpc_tools import protoc  # a development dependency only

    sources = sorted(PROTO_DIR.glob("v1/*.proto"))
    args = [
        "grpc_tools.protoc",
        f"-Ifleetscope/proto={PROTO_DIR}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *[f"fleetscope/proto/{p.relative_to(PROTO_DIR)}" for p in sources],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    return sorted((out_dir / "fleetscope" / "proto" / "v1").glob("*_pb2*"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if stale")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        produced = generate(Path(tmp))
        stale = []
        for path in produced:
            target = PROTO_DIR / "v1" / path.name
            if not target.exists() or not filecmp.cmp(path, target, shallow=False):
                stale.append(target)
                if not args.check:
                    target.write_bytes(path.read_bytes())
    if args.check and stale:
        print("stale generated files: " + ", ".join(str(p) for p in stale), file=sys.stderr)
        return 1
    print(("up to date" if not stale else f"wrote {len(stale)} files") if not args.check else "up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
