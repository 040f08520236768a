"""What ties unitless to Beam's runners: bundle guards and every patch of Beam's internals
(``bundles``, ``beam_patches``), the runners' options (``runners``), Flink's job server
(``flink``) and numba's on-disk cache (``jit_cache``)."""
