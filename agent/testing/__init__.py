"""Recorded-hardware fakes and replay parsers for tests, benchmarks and simulation; never imported by the daemon."""
