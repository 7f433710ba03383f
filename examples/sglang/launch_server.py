"""`python3 -m sglang.launch_server ...` -> examples/fake_engine.py (server mode unless --offline)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fake_engine import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
