"""`python3 -m sglang.bench_one_batch ...` -> examples/fake_engine.py --offline (no port; done at exit 0)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fake_engine import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] + ["--offline"]))
