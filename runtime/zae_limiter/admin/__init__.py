"""Administrative operations of `Repository`, one mixin per area."""
