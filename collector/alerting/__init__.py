"""Alerting: rules over incidents, metrics, absence and SLOs, and the notifiers that deliver them.

* ``rules``: the TOML rules file (notifiers, rules, ``[[slo]]``, ``[detectors]``), validated with
  the line and the reason, and ``RuleSet``, which reloads it on change and keeps the last good rules;
* ``engine``: the alert job (lease ``alerts``): pending -> firing -> resolved, one notification
  row per transition and notifier, silences honoured;
* ``notifiers``: delivery (webhook, Slack, Alertmanager) with claims, retries and every attempt recorded;
* ``silences``: adding and expiring silences.

See docs/alerting.md.
"""
