"""Ingest: the gRPC server and service, batch validation, and importing scan results."""
