"""Alerting: rules over incidents, and the notifiers that deliver them (webhook, Slack, Alertmanager).

Empty until the alerting work lands; incidents come from the detectors in ``fleetscope.collector.jobs``
and from ingest, and alert rules will read them here.
"""
