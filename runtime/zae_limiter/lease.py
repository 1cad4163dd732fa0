"""Former home of the lease: see `zae_limiter.acquire.lease`."""

from .acquire.lease import Lease, LeaseResource

__all__ = ["Lease", "LeaseResource"]
