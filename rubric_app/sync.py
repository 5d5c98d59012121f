"""Sync the oncall: pt2 queue from GitHub, and process webhook deliveries.

(Contract laid by the foundation; the GitHub issue implements it.)
"""

from __future__ import annotations


def sync_queue(*, full: bool = False):
    """Sync the queue (full: every page; else since the high-water mark). Returns a report."""
    raise NotImplementedError("implemented by the GitHub sync issue")


def process_webhook(delivery_id: int) -> None:
    """Apply one stored WebhookDelivery to the local mirror, never overwriting newer data."""
    raise NotImplementedError("implemented by the GitHub sync issue")
