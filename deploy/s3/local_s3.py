"""A local S3-compatible object store for tests and trials: MinIO (built by
deploy/s3/build_minio.sh) on a free loopback port, its data in a work directory, in its own
process group.

    with LocalS3(workdir) as s3:
        os.environ.update(s3.environment())  # boto3 and Beam's S3 file system use it
        s3.create_bucket("models")

Environment: ``UNITLESS_MINIO`` (use this binary, do not build one).
"""
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
HOST = "127.0.0.1"
IDENTITY, CREDENTIAL = "unitless", "unitless-secret"  # a throwaway local server's


def minio_binary(timeout=1800):
    found = os.environ.get("UNITLESS_MINIO")
    if found:
        return found
    built = subprocess.run(["bash", str(HERE / "build_minio.sh")], stdout=subprocess.PIPE,
                           stdin=subprocess.DEVNULL, text=True, timeout=timeout, check=True)
    return built.stdout.split()[-1]


def _free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class LocalS3:
    def __init__(self, workdir, startup_timeout=60):
        self.workdir = Path(workdir)
        self.startup_timeout = startup_timeout
        self.port = _free_port()
        self.endpoint = f"http://{HOST}:{self.port}"
        self.proc = None

    def environment(self):
        """What boto3 (so Beam's S3 file system) needs to reach this server."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": IDENTITY,
                "AWS_SECRET_ACCESS_KEY": CREDENTIAL, "AWS_DEFAULT_REGION": "us-east-1"}

    def start(self):
        (self.workdir / "data").mkdir(parents=True, exist_ok=True)
        self.log = self.workdir / "minio.log"
        env = {**os.environ, "MINIO_ROOT_USER": IDENTITY, "MINIO_ROOT_PASSWORD": CREDENTIAL,
               "MINIO_BROWSER": "off", "MINIO_UPDATE": "off"}
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [minio_binary(), "server", str(self.workdir / "data"), "--quiet",
                 "--address", f"{HOST}:{self.port}", "--console-address",
                 f"{HOST}:{_free_port()}"], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        deadline = time.time() + self.startup_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"MinIO exited ({self.proc.returncode}):\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.endpoint}/minio/health/ready", timeout=1):
                    return self
            except OSError:  # not listening yet, or 503 while it starts
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"MinIO did not listen within {self.startup_timeout} s")

    def client(self):
        import boto3
        env = self.environment()
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])

    def create_bucket(self, name):
        self.client().create_bucket(Bucket=name)
        return f"s3://{name}"

    def tail(self, lines=40):
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
