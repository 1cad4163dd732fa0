"""The public path of the lease types (the specification, section 2.1, names
`zae_limiter.lease.LeaseResource`); they live in `zae_limiter.acquire.lease`."""

from .acquire.lease import Lease, LeaseResource

__all__ = ["Lease", "LeaseResource"]
