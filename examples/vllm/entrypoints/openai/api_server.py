"""`python3 -m vllm.entrypoints.openai.api_server --model M ...` -> examples/fake_vllm.py --model M ..."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

from fake_vllm import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], serve=False))
