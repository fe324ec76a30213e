import sys
from pathlib import Path

# make tests/corpus.py importable as `corpus` from any test module
sys.path.insert(0, str(Path(__file__).resolve().parent))
