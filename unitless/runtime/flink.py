"""Where Beam's Flink job server jar comes from, for `unitless train --runner FlinkRunner`, the
Flink tests and benchmarks (deploy/flink/job_server.py). Beam's own download of the job server
is not reachable everywhere, so the project assembles one from Maven Central
(deploy/flink/build_job_server.sh: Beam's Flink 1.19 runner 2.70.0, cached)."""
import atexit
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The JVM options Flink's own launch scripts give a Java 17 JVM (Flink 1.19's
# env.java.default-opts.all): its serializer (Kryo) reads JDK classes' private fields, e.g. of
# the lists a streaming splittable DoFn keeps in state, which Java 17 forbids unless opened.
JAVA_17_OPENS = tuple(f"--add-opens=java.base/{package}=ALL-UNNAMED" for package in (
    "java.lang", "java.net", "java.io", "java.nio", "sun.nio.ch", "java.lang.reflect",
    "java.text", "java.time", "java.util", "java.util.concurrent",
    "java.util.concurrent.atomic", "java.util.concurrent.locks")) + (
    "--add-exports=java.base/sun.net.util=ALL-UNNAMED",
    "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED")
# Flink sends a network buffer downstream once it is full or after this long (100 ms by default)
BUFFER_TIMEOUT = "execution.buffer-timeout.interval"
BUILD_SCRIPT = REPO / "deploy" / "flink" / "build_job_server.sh"
CACHED = ("flink", "beam-2.70.0-flink-1.19", "beam-flink-job-server.jar")  # the script's place


def job_server_jar(build: bool = True, timeout: float = 1800.0) -> Path:
    """The job server jar: ``$UNITLESS_FLINK_JOB_SERVER_JAR``; else the one
    ``build_job_server.sh`` prints (building it first when it is not cached and ``build``);
    installed without the repository, where that script caches it. FileNotFoundError (what
    to do, one line) when there is none; RuntimeError when building it failed."""
    given = os.environ.get("UNITLESS_FLINK_JOB_SERVER_JAR")
    if given:
        jar = Path(given).expanduser()
        if not jar.is_file():
            raise FileNotFoundError(f"UNITLESS_FLINK_JOB_SERVER_JAR={jar}: no such file")
        return jar
    if build and BUILD_SCRIPT.is_file():
        built = subprocess.run(["bash", str(BUILD_SCRIPT)], stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=timeout)
        if built.returncode != 0:
            raise RuntimeError(f"{BUILD_SCRIPT} failed ({built.returncode}):\n"
                               + "\n".join(built.stderr.splitlines()[-40:]))
        return Path(built.stdout.split()[-1])
    cache = Path(os.environ.get("UNITLESS_CACHE_DIR") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "unitless")
    jar = cache.joinpath(*CACHED)
    if not jar.is_file():
        raise FileNotFoundError("no Flink job server jar: pass --flink_job_server_jar or set "
                                "$UNITLESS_FLINK_JOB_SERVER_JAR (deploy/flink/"
                                "build_job_server.sh builds one)")
    return jar


def embedded_buffer_timeout(ms: float) -> None:
    """Have the Flink job server that Beam's FlinkRunner starts from this process (an embedded
    cluster for this process's jobs) send network buffers within ``ms`` milliseconds: a job
    server started without a configuration directory reads ``$FLINK_CONF_DIR``'s, so it names
    one holding that entry, unless it is set already (the user's own configuration)."""
    if os.environ.get("FLINK_CONF_DIR"):
        return
    conf = tempfile.mkdtemp(prefix="unitless-flink-conf-")
    Path(conf, "config.yaml").write_text(f"{BUFFER_TIMEOUT}: {int(ms)} ms\n")
    atexit.register(shutil.rmtree, conf, True)  # (read again by every job of that server)
    os.environ["FLINK_CONF_DIR"] = conf
