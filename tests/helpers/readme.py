"""The README's fenced blocks, for the tests that run them as written: a shell block's
commands (continuation lines joined), a Python block's code, the text block of its output."""
import gzip
import re
import subprocess
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def blocks(language, section=None, path=README):
    """The ``language`` blocks of the README (or of the page at ``path``), or of its section
    headed ``## section``."""
    text = path.read_text()
    if section is not None:
        start = text.index(f"## {section}\n")
        end = text.find("\n## ", start + 1)
        text = text[start:end if end > 0 else None]
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


def commands(section):
    """The shell commands of a section's first block, one string each (a trailing comment is
    the reader's, not the shell's)."""
    joined = blocks("sh", section)[0].replace("\\\n", " ")
    return [" ".join(line.split("#")[0].split()) for line in joined.splitlines()
            if line.strip()]


def run(command, cwd, replace=(), timeout=600, background=False, merged=False, **popen):
    """``command`` through bash in ``cwd``, its ``./unitless.sh`` the clone's and each of
    ``replace``'s (text, by) pairs replaced; the finished process (``merged``: its stderr in
    its stdout, in the order a terminal shows them), or with ``background`` the running one
    (``popen``: Popen's arguments)."""
    command = command.replace("./unitless.sh", str(ROOT / "unitless.sh"))
    command = command.replace("python deploy/", f"python {ROOT}/deploy/")
    for text, by in replace:
        assert text in command, (text, command)
        command = command.replace(text, by)
    if background:
        return subprocess.Popen(["bash", "-c", command], cwd=cwd, **popen)
    done = subprocess.run(["bash", "-c", command], cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT if merged else subprocess.PIPE, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done


def write_clicks(directory, files=2, rows=600, seed=0):
    """clicks/part-<i>.csv.gz as the files recipe reads them: id, customer (c0..c49, c42
    among them), clicked (0/1) and features on scales from 1e-3 to 1e5."""
    rng = np.random.default_rng(seed)
    folder = Path(directory) / "clicks"
    folder.mkdir(parents=True, exist_ok=True)
    for part in range(files):
        X = rng.normal(size=(rows, 3)) * [1e-3, 1.0, 1e5]
        clicked = (X @ [1e3, -1.0, 1e-5] + rng.normal(size=rows) > 0).astype(int)
        lines = ["id,customer,clicked,price,age,visits"] + [
            f"{part}-{i},c{(part * rows + i) % 50},{clicked[i]},{X[i, 0]:.6g},{X[i, 1]:.6g},"
            f"{X[i, 2]:.6g}" for i in range(rows)]
        with gzip.open(folder / f"part-{part}.csv.gz", "wt") as f:
            f.write("\n".join(lines) + "\n")
    return files * rows
