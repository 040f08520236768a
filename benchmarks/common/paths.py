"""Where the benchmarks read and write: the repository, the results, the scratch space and the
shared data sets (``$UNITLESS_DATA``, else ``../shared/data`` beside the repository)."""
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
TMP = RESULTS / "tmp"  # git-ignored scratch space (VW text files and caches)
DATA = Path(os.environ.get("UNITLESS_DATA", ROOT.parent / "shared" / "data"))
if not (DATA / "shuttle").exists():
    DATA = Path("/work/shared/data")
SHUTTLE = DATA / "shuttle"
