"""Kept where users' job servers import it from: ``unitless.runtime.flink``."""
from .runtime.flink import JAVA_17_OPENS, embedded_buffer_timeout, job_server_jar

__all__ = ["JAVA_17_OPENS", "embedded_buffer_timeout", "job_server_jar"]
