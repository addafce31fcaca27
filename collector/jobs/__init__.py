"""Jobs that run once per fleet under a lease: the rollup job (detectors join it)."""
