"""How the `unitless` command talks to its user on stderr."""
import logging


def configure_logging() -> None:
    """unitless's own messages (progress, checkpoints, warnings) on stderr; Beam's below
    CRITICAL and kafka-python's below ERROR are not for the user of the `unitless` command (for
    instance the 'apitools not found' warning Beam logs when it is imported), nor other
    libraries' below WARNING (boto's "found credentials"); a failing DoFn is reported once, by
    us (one line) or by the re-raised exception. Users embedding the transforms keep their own
    logging."""
    root = logging.getLogger()
    if not any(getattr(h, "unitless", False) for h in root.handlers):
        for plain in [h for h in root.handlers if type(h) is logging.StreamHandler]:
            root.removeHandler(plain)  # the default one a module-level logging.warning adds
        handler = logging.StreamHandler()
        handler.unitless = True  # type: ignore[attr-defined]  # (marks it unitless's)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
        handler.addFilter(_ours_or_serious)
        root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.getLogger("apache_beam.runners").setLevel(logging.CRITICAL)
    logging.getLogger("kafka").setLevel(logging.CRITICAL)  # its retries are reported by us


def _ours_or_serious(record):
    if record.name == "unitless" or record.name.startswith("unitless."):
        return True
    # (Beam's Prism runner renames the records of the Prism process it logs)
    from_beam = "apache_beam" in record.pathname or record.name.startswith(
        ("apache_beam", "PrismRunner", "SdkWorker"))
    # (a failing pipeline is told by its exception: Prism's job logs repeat its traceback)
    return record.levelno >= (logging.CRITICAL if from_beam else logging.WARNING)
