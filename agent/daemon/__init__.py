"""The daemon: the sampling loop, the spool, the uplink and the local SDK endpoint."""
